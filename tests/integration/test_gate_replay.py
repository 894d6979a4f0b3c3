"""Replay of the gate: the evidence of recorded finish runs, re-evaluated by today's
`evaluate_chain`, gives the decisions recorded then, byte for byte (canonical JSON), in
every recorded variation (a record dropped or forged, a commit gone or changed, another
policy in force, another run id)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.canonical import canonical_json
from coordinator.integration.evidence import GitFacts
from coordinator.integration.gate import RULES, SHARED_KINDS, evaluate_chain, rule_for
from registry.signing import Keyring
from tests.integration.gate_corpus import KEY, decide, records, variations

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


def test_every_recorded_link_belongs_to_exactly_one_rule_of_the_table() -> None:
    assert len({r.code for r in RULES}) == len(RULES) and all(r.explanation for r in RULES)
    for name in CASES:
        for d in json.loads((RECORDED / f"{name}.json").read_text())["decisions"]:
            for link in d["links"]:
                owners = [r.code for r in RULES if r.adds(link["link"])]
                assert len(owners) == 1 or link["link"].split(":")[0] in SHARED_KINDS, (link, owners)
                rule = rule_for(link["link"])
                assert (rule.code if rule else None) == (owners[0] if owners else None)


def test_a_rule_that_stops_the_chain_ends_the_fold() -> None:
    """Without a stack plan no later rule runs: the decision names only what was checked."""
    case = json.loads((RECORDED / "clean.json").read_text())
    recs = [r for r in records(case) if r.topic != "integration.stack_plan"]
    res = evaluate_chain(recs, keyring=Keyring({KEY.kid: KEY.public}), facts=GitFacts(), run_id="run-1")
    assert not res.passed and [l.link for l in res.links] == ["stack_plan"]
    assert res.head_ref is None and res.required_suites == [] and res.stack_plan_id is None


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


def test_correctly_signed_but_inconsistent_records_are_judged_link_by_link() -> None:
    """The signed-inconsistent family: every record carries a valid signature, one field
    disagrees with the rest; each link rule must name it (the trailer's digest, the plan's
    digest against the proposal's, the consent's token digest against its request...)."""
    signed = [n for n in CASES if "signed-inconsistent" in json.loads((RECORDED / f"{n}.json").read_text())
              .get("families", [])]
    assert signed, "no recording of the signed-inconsistent family"
    details: set[str] = set()
    for name in signed:
        case = json.loads((RECORDED / f"{name}.json").read_text())
        for variation, i in case["variations"].items():
            if not variation.startswith("signed-"):
                continue
            links = case["decisions"][i]["links"]
            assert not any(l["link"].startswith(("signature:", "binding:")) for l in links), (name, variation)
            bad = {(l["link"].split(":")[0], l["detail"]) for l in links if l["status"] != "ok"}
            details |= {d for _, d in bad}
            if variation.startswith("signed-consent"):
                assert ("consent", "human approval required by policy") in bad, (name, variation)
            if variation.startswith("signed-diff-trailer") and bad:
                assert bad == {("checkpoint", "commit trailers do not name this proposal")}, (name, variation)
    assert {"plan digest differs from the verified proposal", "commit trailers do not name this proposal",
            "diff digest differs from the plan", "applied on another base",
            "checkpoint tree differs from the ApplyResult",
            "the recorded policy differs from the digest it records"} <= details


def test_a_split_layer_escalates_the_required_suites_and_keeps_its_parents_evidence() -> None:
    """A plan entry naming `<proposal>:split-N` is judged by its parent's verified record (not
    by the plan's digest, which is the part's) and adds the policy's escalate_on_split suites."""
    import dataclasses

    from coordinator.integration.evidence import policy_from_record, sign_artifact
    case = json.loads((RECORDED / "clean.json").read_text())
    recs = records(case)
    pol = dataclasses.replace(policy_from_record(next(r for r in recs if r.topic == "integration.policy").artifact),
                              escalate_on_split=("lint",))
    keyring = Keyring({KEY.kid: KEY.public})
    whole = evaluate_chain(recs, keyring=keyring, facts=GitFacts(commits=case["facts"]), run_id="run-1", policy=pol)
    assert "lint" not in whole.required_suites
    plan = max((r for r in recs if r.topic == "integration.stack_plan"), key=lambda r: r.sequence)
    entries = [dict(e) for e in plan.artifact["ordered_proposals"]]
    entries[0] = {**entries[0], "proposal_id": entries[0]["proposal_id"] + ":split-1", "diff_digest": "sha256:" + "0" * 64}
    split_plan = type(plan)(plan.sequence, plan.topic, sign_artifact({**plan.artifact, "ordered_proposals": entries},
                                                                      KEY))
    split = evaluate_chain([split_plan if r is plan else r for r in recs], keyring=keyring,
                           facts=GitFacts(commits=case["facts"]), run_id="run-1", policy=pol)
    assert "lint" in split.required_suites
    links = {l.link: l for l in split.links}
    assert f"proposal:{entries[0]['proposal_id']}" not in links  # the parent's record stands for the part
    assert links["validation:lint"].status == "missing"


def test_the_policy_in_force_is_checked_against_the_recorded_one_only() -> None:
    from coordinator.integration.evidence import policy_from_record
    case = json.loads((RECORDED / "clean.json").read_text())
    recs = records(case)
    keyring, facts = Keyring({KEY.kid: KEY.public}), GitFacts(commits=case["facts"])
    same = policy_from_record(next(r for r in recs if r.topic == "integration.policy").artifact)
    res = evaluate_chain(recs, keyring=keyring, facts=facts, run_id="run-1", policy=same)
    assert res.passed and not [l for l in res.links if l.link == "policy"]
    unrecorded = [r for r in recs if r.topic != "integration.policy"]
    res = evaluate_chain(unrecorded, keyring=keyring, facts=facts, run_id="run-1", policy=same)
    assert res.passed and not [l for l in res.links if l.link == "policy"]  # nothing recorded to differ from


def test_a_plan_whose_layers_all_lack_apply_results_has_no_head() -> None:
    case = json.loads((RECORDED / "clean.json").read_text())
    recs = [r for r in records(case) if r.topic != "integration.apply_result"]
    res = evaluate_chain(recs, keyring=Keyring({KEY.kid: KEY.public}), facts=GitFacts(commits=case["facts"]),
                         run_id="run-1")
    assert res.head_ref is None and not res.passed and res.base_ref is not None


def _clean(**over):
    """The clean case's records, keyring and facts, and its recorded policy with `over` changed."""
    import dataclasses

    from coordinator.integration.evidence import policy_from_record
    case = json.loads((RECORDED / "clean.json").read_text())
    recs = records(case)
    pol = policy_from_record(next(r for r in recs if r.topic == "integration.policy").artifact)
    return recs, Keyring({KEY.kid: KEY.public}), GitFacts(commits=case["facts"]), dataclasses.replace(pol, **over)


def test_every_required_suite_is_judged_after_one_that_passed() -> None:
    """unit passes on the head; `zz-more`, required too and sorted after it, has no report."""
    from coordinator.integration.evidence import sign_artifact
    recs, keyring, facts, pol = _clean()
    req = next(r for r in recs if r.topic == "integration.requirements")
    more = type(req)(req.sequence, req.topic, sign_artifact(
        {**req.artifact, "required_suites": [*req.artifact["required_suites"], "zz-more"]}, KEY))
    res = evaluate_chain([more if r is req else r for r in recs], keyring=keyring, facts=facts, run_id="run-1",
                         policy=pol)
    got = {l.link: l.status for l in res.links if l.link.startswith("validation:")}
    assert got == {"validation:unit": "ok", "validation:zz-more": "missing"}


def test_per_layer_reports_count_only_when_every_layer_passed() -> None:
    from coordinator.integration.evidence import sign_artifact
    recs, keyring, facts, pol = _clean(validation_counts="per_layer_or_final")
    report = next(r for r in recs if r.topic == "integration.validation_report")
    applied = [r.artifact for r in recs if r.topic == "integration.apply_result" and r.artifact.get("applied")]
    rest = [r for r in recs if r.topic != "integration.validation_report"]
    top = max(r.sequence for r in recs)

    def layers(failing_at: int | None, suites=("unit",)):
        return [type(report)(top + 1 + i + 10 * k, report.topic, sign_artifact(
            {**report.artifact, "suite": s, "head_ref": a["head_ref"], "included_proposals": [a["proposal_id"]],
             "passed": i != failing_at}, KEY)) for k, s in enumerate(suites) for i, a in enumerate(applied)]

    ok = evaluate_chain(rest + layers(None), keyring=keyring, facts=facts, run_id="run-1", policy=pol)
    assert {l.link: (l.status, l.detail) for l in ok.links}["validation:unit"] == ("ok", "per-layer reports")
    bad = evaluate_chain(rest + layers(1), keyring=keyring, facts=facts, run_id="run-1", policy=pol)
    assert {l.link: l.status for l in bad.links}["validation:unit"] == "missing"
    two = dict(pol.suites_by_risk)
    two.update({k: ("unit", "zz-more") for k in two})
    import dataclasses
    both = evaluate_chain(rest + layers(None, ("unit",)), keyring=keyring, facts=facts, run_id="run-1",
                          policy=dataclasses.replace(pol, suites_by_risk=two))
    got = {l.link: l.status for l in both.links if l.link.startswith("validation:")}
    assert got == {"validation:unit": "ok", "validation:zz-more": "missing"}


def test_a_path_under_the_human_gate_asks_for_consent_at_low_risk() -> None:
    recs, keyring, facts, pol = _clean(human_gate_paths=("f0.txt",), human_gate_risk=())
    res = evaluate_chain(recs, keyring=keyring, facts=facts, run_id="run-1", policy=pol)
    assert res.human_gate and {l.link: l.status for l in res.links}["consent"] == "missing"
