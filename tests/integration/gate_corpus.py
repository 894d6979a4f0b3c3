"""Recorded gate decisions: the evidence records of real finish runs (real git, real
signatures), the git facts read for them, and the decision the gate gave on each of a
fixed set of variations (a record dropped, a signature forged, a commit gone, another
policy in force, another run).

A case may also carry the variation family "signed-inconsistent": every record stays
correctly signed by the run's key, but one field is made to disagree with the rest of
the evidence (a proposal's diff digest, a layer's base or tree, a commit's
`Dome-Diff-Digest` trailer, a consent's token digest...), so each link rule is judged on
what it compares, not on a signature. Cases recorded before that family have only the
first one.

`python -m tests.integration.gate_corpus DIR [--family signed-inconsistent] [--suffix S]
[SCENARIO...]` records a new corpus with today's code (files `<scenario><suffix>.json`);
`tests/integration/test_gate_replay.py` re-evaluates the committed one and requires the
same decisions byte for byte. A recorded file is never edited: a change that makes the
gate decide differently says why and records a new one.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from coordinator.integration.evidence import GitFacts, Record, policy_from_record, sign_artifact
from coordinator.integration.gate import evaluate_chain
from coordinator.integration.policy import IntegrationPolicy
from registry.canonical import canonical_json
from registry.signing import Keyring, SigningKey

KEY = SigningKey(b"\x01" * 32)
FORGER = SigningKey(b"\x02" * 32)
RUN_ID = "run-1"


def records(case: dict[str, Any]) -> list[Record]:
    """The evidence records of a recorded case."""
    return [Record(int(r["sequence"]), str(r["topic"]), r["artifact"]) for r in case["records"]]


def _facts(raw: dict[str, Any]) -> GitFacts:
    return GitFacts(commits=raw)


FAMILY_INCONSISTENT = "signed-inconsistent"
OTHER_DIGEST = "sha256:" + "e" * 64
OTHER_OID = "f" * 40


def _resigned(r: Record, **changes: Any) -> Record:
    """The record with some fields changed, signed again by the run's key (a valid signature)."""
    return Record(r.sequence, r.topic, sign_artifact({**r.artifact, **changes}, KEY))


def _signed_inconsistent(recs: list[Record], facts: dict[str, Any], gf: GitFacts) -> Iterator[
        tuple[str, list[Record], GitFacts, str, IntegrationPolicy | None]]:
    """Correctly signed records (or git facts) that disagree with the rest of the evidence."""
    def swap(r: Record, **changes: Any) -> list[Record]:
        new = _resigned(r, **changes)
        return [new if x is r else x for x in recs]

    edits: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "integration.proposal_verified": lambda a: {"diff_digest": OTHER_DIGEST},
        "integration.policy": lambda a: {"policy_digest": OTHER_DIGEST},
        "integration.requirements": lambda a: {"required_suites": [*a.get("required_suites", []), "extra-suite"]},
        "promotion.consent_granted": lambda a: {"token_digest": OTHER_DIGEST},
        "promotion.consent_requested": lambda a: {"token_digest": OTHER_DIGEST},
    }
    for r in recs:
        if r.topic in edits:
            yield f"signed-{r.topic.split('.')[1]}-{r.sequence}", swap(r, **edits[r.topic](r.artifact)), gf, RUN_ID, None
        if r.topic == "promotion.consent_granted":
            yield f"signed-consent-head-{r.sequence}", swap(r, head_ref=OTHER_OID), gf, RUN_ID, None
            yield f"signed-consent-id-{r.sequence}", swap(r, consent_id="consent-other"), gf, RUN_ID, None
        if r.topic == "integration.apply_result" and r.artifact.get("applied"):
            for field, value in (("diff_digest", OTHER_DIGEST), ("base_ref", OTHER_OID),
                                 ("head_tree_hash", OTHER_OID)):
                yield f"signed-apply-{field}-{r.sequence}", swap(r, **{field: value}), gf, RUN_ID, None
        if r.topic == "integration.validation_report":
            yield f"signed-validation-head-{r.sequence}", swap(r, head_ref=OTHER_OID), gf, RUN_ID, None
            yield (f"signed-validation-included-{r.sequence}",
                   swap(r, included_proposals=list(r.artifact.get("included_proposals", []))[:-1]), gf, RUN_ID, None)
        if r.topic == "integration.stack_plan":
            entries = [dict(e) for e in r.artifact.get("ordered_proposals", [])]
            if entries:
                entries[0]["diff_digest"] = OTHER_DIGEST
                yield f"signed-plan-digest-{r.sequence}", swap(r, ordered_proposals=entries), gf, RUN_ID, None
    for oid, info in sorted(facts.items()):
        trailers = info.get("trailers_all") or {}
        if trailers.get("Dome-Diff-Digest"):  # the proposal named, its digest another
            wrong = [f"{v.split(' ', 1)[0]} {OTHER_DIGEST}" for v in trailers["Dome-Diff-Digest"]]
            changed = {**facts, oid: {**info, "trailers_all": {**trailers, "Dome-Diff-Digest": wrong}}}
            yield f"signed-diff-trailer-{oid[:12]}", recs, _facts(changed), RUN_ID, None


def variations(case: dict[str, Any]) -> Iterator[tuple[str, list[Record], GitFacts, str,
                                                       IntegrationPolicy | None]]:
    """Every variation of one recorded run, by name: (records, facts, run id, policy in force)."""
    recs, facts = records(case), case["facts"]
    gf = _facts(facts)
    yield "as-recorded", recs, gf, RUN_ID, None
    yield "other-run", recs, gf, "run-2", None
    yield "policy-in-force", recs, gf, RUN_ID, IntegrationPolicy()
    yield "per-layer-policy", recs, gf, RUN_ID, IntegrationPolicy(validation_counts="per_layer_or_final")
    yield "no-records", [], gf, RUN_ID, None
    for r in recs:
        yield f"drop-{r.sequence}", [x for x in recs if x is not r], gf, RUN_ID, None
        forged = Record(r.sequence, r.topic, sign_artifact(r.artifact, FORGER))
        yield f"forge-{r.sequence}", [forged if x is r else x for x in recs], gf, RUN_ID, None
    recorded = [r for r in recs if r.topic == "integration.policy"]
    per_layer = dataclasses.replace(policy_from_record(recorded[-1].artifact) if recorded else IntegrationPolicy(),
                                    validation_counts="per_layer_or_final")
    for r in recs:
        if r.topic == "integration.validation_report":
            yield f"per-layer-drop-{r.sequence}", [x for x in recs if x is not r], gf, RUN_ID, per_layer
    reports = [r for r in recs if r.topic == "integration.validation_report"]
    applied = [(r.artifact["head_ref"], r.artifact["proposal_id"]) for r in recs
               if r.topic == "integration.apply_result" and r.artifact.get("applied")]
    if reports and applied:  # a passing report on each layer instead of one on the head
        rest = [r for r in recs if r.topic != "integration.validation_report"]
        top = max(r.sequence for r in recs)
        layers = [Record(top + i, r.topic, sign_artifact({**r.artifact, "head_ref": c, "passed": True,
                                                          "included_proposals": [pid]}, KEY))
                  for r in reports for i, (c, pid) in enumerate(applied, start=1 + len(applied) * reports.index(r))]
        yield "per-layer-reports", rest + layers, gf, RUN_ID, per_layer
        yield "per-layer-reports-final-only", rest + layers, gf, RUN_ID, None
    for oid in sorted(facts):
        yield f"no-commit-{oid[:12]}", recs, _facts({k: v for k, v in facts.items() if k != oid}), RUN_ID, None
        for field in ("tree", "parents", "trailers_all"):
            changed = {**facts, oid: {**facts[oid], field: [] if field == "parents" else
                                      ({} if field == "trailers_all" else "0" * 40)}}
            yield f"{field}-{oid[:12]}", recs, _facts(changed), RUN_ID, None
    if FAMILY_INCONSISTENT in case.get("families", ()):
        yield from _signed_inconsistent(recs, facts, gf)


def decide(records: list[Record], facts: GitFacts, run_id: str, policy: IntegrationPolicy | None) -> str:
    keyring = Keyring({KEY.kid: KEY.public})
    res = evaluate_chain(records, keyring=keyring, facts=facts, run_id=run_id, policy=policy)
    return canonical_json(res.to_dict()).decode()


def _scenarios() -> dict[str, Callable[[Path, Path], Any]]:
    from tests.integration.conftest import edit_line, make_proposal

    suite = {"suite": "command", "name": "unit", "argv": ["sh", "-c", "test ! -e BROKEN"]}
    lint_fails = {"suite": "command", "name": "lint", "argv": ["sh", "-c", "exit 1"]}

    def policy(**kw: Any) -> IntegrationPolicy:
        base: dict[str, Any] = dict(suites_by_risk={"low": ("unit",), "medium": ("unit",), "high": ("unit",)},
                                    human_gate_risk=("high",), promote_to="refs/heads/release")
        base.update(kw)
        return IntegrationPolicy(**base)

    def props(repo: Path, n: int, **kw: Any) -> list[tuple[dict, bytes]]:
        return [make_proposal(repo, f"p{k}", edit_line(f"f{k}.txt", 10, "x"), **kw) for k in range(n)]

    def clean(repo: Path, tmp: Path) -> Any:
        return finish(repo, tmp, props(repo, 3), policy())

    def culprit(repo: Path, tmp: Path) -> Any:
        ps = props(repo, 4)
        ps[2] = make_proposal(repo, "p2", lambda r: (r / "BROKEN").write_text("x\n"))
        return finish(repo, tmp, ps, policy())

    def failing(repo: Path, tmp: Path) -> Any:
        return finish(repo, tmp, props(repo, 2), policy(suites_by_risk={"low": ("unit", "lint")}),
                      (suite, lint_fails))

    def consent(repo: Path, tmp: Path) -> Any:
        from coordinator.integration.consent import grant_consent
        pol = policy()
        res, ledger = finish(repo, tmp, props(repo, 2, risk={"class": "high"}), pol, keep=True)
        grant_consent(ledger, RUN_ID, res.consent_token, key=KEY, ops_root=tmp / "ops", policy=pol)
        return ledger

    def finish(repo: Path, tmp: Path, ps: list, pol: IntegrationPolicy, validations: tuple = (suite,),
               keep: bool = False) -> Any:
        from coordinator.integration.finish import FinishContext, finish_run
        from tests.integration.conftest import head
        from tests.integration.fakes import MemLedger
        ledger = MemLedger()
        ctx = FinishContext(run_id=RUN_ID, repo=repo, base_ref=head(repo), proposals=[p for p, _ in ps],
                            ledger=ledger, signing_key=KEY, ops_root=tmp / "ops", validations=list(validations),
                            policy=pol, diff_loader=lambda p: dict((q["proposal_id"], d) for q, d in ps)[
                                p["proposal_id"]], seed=3)
        res = finish_run(ctx)
        return (res, ledger) if keep else ledger

    return {"clean": clean, "culprit": culprit, "failing": failing, "consent": consent}


def record(out: Path, *, families: tuple[str, ...] = (), suffix: str = "", only: tuple[str, ...] = ()) -> None:
    from coordinator.integration.recorder import git_facts, records_of
    out.mkdir(parents=True, exist_ok=True)
    for name, make in _scenarios().items():
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "r"
            repo.mkdir()
            repo_dir = _repo(repo)
            ledger = make(repo_dir, Path(tmp))
            recs = [r for r in records_of(ledger, RUN_ID) if r.topic.startswith(("integration.", "promotion."))
                    and r.topic != "promotion.computed"]
            facts = {k: dict(v) for k, v in git_facts(repo_dir, recs).commits.items()}
        case: dict[str, Any] = {"records": [{"sequence": r.sequence, "topic": r.topic, "artifact": r.artifact}
                                            for r in recs], "facts": facts}
        if families:
            case["families"] = list(families)
        texts: list[str] = []
        case["variations"] = {}
        for v, rs, f, run, pol in variations(case):
            text = decide(rs, f, run, pol)
            if text not in texts:
                texts.append(text)
            case["variations"][v] = texts.index(text)
        case["decisions"] = [json.loads(t) for t in texts]
        (out / f"{name}{suffix}.json").write_text(dump(case))


def dump(case: dict[str, Any]) -> str:
    """One record, commit and decision a line: small diffs, readable by eye."""
    lines = ["{"]
    if case.get("families"):
        lines.append(f'"families": {json.dumps(case["families"])},')
    for key in ("records", "decisions"):
        items = [json.dumps(x, sort_keys=True) for x in case[key]]
        lines.append(f'"{key}": [\n' + ",\n".join(items) + "\n],")
    lines.append('"facts": {\n' + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                                            for k, v in sorted(case["facts"].items())) + "\n},")
    lines.append('"variations": ' + json.dumps(case["variations"], indent=0) + "\n}")
    return "\n".join(lines) + "\n"


def _repo(where: Path) -> Path:
    from tests.conftest import git
    for k in range(6):
        (where / f"f{k}.txt").write_text("".join(f"{k}:{i}\n" for i in range(40)))
    git(where, "init", "-q", "-b", "main")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "base")
    return where


def main(argv: list[str]) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tests.integration.gate_corpus")
    ap.add_argument("out", type=Path)
    ap.add_argument("scenarios", nargs="*", help="record only these (default: all)")
    ap.add_argument("--family", action="append", default=[], choices=[FAMILY_INCONSISTENT])
    ap.add_argument("--suffix", default="", help="added to each file name (a new recording never replaces an old one)")
    args = ap.parse_intermixed_args(argv)
    record(args.out, families=tuple(args.family), suffix=args.suffix, only=tuple(args.scenarios))


if __name__ == "__main__":
    main(sys.argv[1:])
