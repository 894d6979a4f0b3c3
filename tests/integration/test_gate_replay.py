"""Replay of the gate: the evidence of recorded finish runs, re-evaluated by today's
`evaluate_chain`, gives the decisions recorded then, byte for byte (canonical JSON), in
every recorded variation (a record dropped or forged, a commit gone or changed, another
policy in force, another run id)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.canonical import canonical_json
from tests.integration.gate_corpus import decide, variations

RECORDED = Path(__file__).resolve().parent / "recorded_gate"
CASES = sorted(p.stem for p in RECORDED.glob("*.json"))


def test_the_corpus_covers_every_kind_of_link_and_outcome() -> None:
    seen: set[tuple[str, str]] = set()
    details: set[str] = set()
    for name in CASES:
        for d in json.loads((RECORDED / f"{name}.json").read_text())["decisions"]:
            seen |= {(l["link"].split(":")[0], l["status"]) for l in d["links"]}
            details |= {l["detail"] for l in d["links"]}
    assert "per-layer reports" in details
    for want in [("policy", "missing"), ("policy", "invalid"), ("stack_plan", "ok"), ("stack_plan", "missing"),
                 ("signature", "invalid"), ("binding", "invalid"), ("proposal", "missing"),
                 ("apply_result", "ok"), ("apply_result", "missing"), ("checkpoint", "missing"),
                 ("checkpoint", "invalid"), ("checkpoint_ancestry", "ok"), ("requirements", "missing"),
                 ("validation", "ok"), ("validation", "failing"), ("validation", "missing"),
                 ("consent", "ok"), ("consent", "missing")]:
        assert want in seen, want


@pytest.mark.parametrize("name", CASES)
def test_recorded_evidence_re_evaluates_to_the_recorded_decisions(name: str) -> None:
    case = json.loads((RECORDED / f"{name}.json").read_text())
    names = case["variations"]
    done = 0
    for variation, records, facts, run_id, policy in variations(case):
        want = canonical_json(case["decisions"][names[variation]]).decode()
        assert decide(records, facts, run_id, policy) == want, (name, variation)
        done += 1
    assert done == len(names)
