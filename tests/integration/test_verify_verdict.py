"""`dome verify`'s verdict, as pure functions: an ok check never carries a detail,
the report's status follows from its checks and the recorded outcome, and a
blocked decision is valid only when its reasons are exactly the gate's."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from coordinator.integration.evidence import (T_CONSENT_REQ, T_GATE, T_PROMOTION, ChainResult, Link, Record,
                                              sign_artifact)
from coordinator.integration.verify import _block_agrees, _chain_links, _finish_agrees, _without_decision
from coordinator.integration.verify_result import (CheckKind, CheckResult, RunVerdict, Status, VerifyReport,
                                                   failed, missing, ok)
from registry.signing import Keyring, SigningKey


def test_an_ok_check_cannot_say_data_is_missing() -> None:
    with pytest.raises(ValueError, match="an ok check carries no detail"):
        CheckResult(CheckKind.EVIDENCE_CHAIN, Status.OK, "validation:unit: missing")
    with pytest.raises(TypeError):
        ok(CheckKind.EVIDENCE_CHAIN, None, "data missing")  # type: ignore[call-arg]
    assert ok(CheckKind.EVIDENCE_CHAIN).to_dict()["detail"] == ""


def _report(outcome: str | None, run_status: str | None, *checks: CheckResult) -> VerifyReport:
    rep = VerifyReport("run-1", outcome=outcome, run_status=run_status)
    for c in checks or (ok(CheckKind.LEDGER_CHAIN),):
        rep.add(c)
    return rep


@pytest.mark.parametrize("outcome,run_status,want", [
    ("promoted", "promoted", RunVerdict.PROMOTED),
    ("promoted", "blocked", RunVerdict.PROMOTED),  # promoted later by `dome promote --consent`
    ("promoted", "failed", RunVerdict.FAILED),     # the ref could not be moved
    ("blocked", "blocked", RunVerdict.BLOCKED),
    ("awaiting_consent", "blocked", RunVerdict.AWAITING_CONSENT),
    (None, "failed", RunVerdict.FAILED),
    (None, "completed", RunVerdict.COMPLETED),
    (None, "promoted", RunVerdict.INVALID),        # says promoted, no decision
    (None, None, RunVerdict.INVALID),
])
def test_status_follows_the_recorded_outcome(outcome, run_status, want) -> None:
    rep = _report(outcome, run_status)
    assert rep.status is want and rep.valid is (want is not RunVerdict.INVALID)
    assert rep.to_dict()["status"] == want.value


@pytest.mark.parametrize("bad", [failed(CheckKind.TREE, "replayed tree differs"),
                                 missing(CheckKind.DIFF, "canonical diff not stored")])
def test_any_check_not_ok_makes_the_run_invalid_whatever_its_outcome(bad) -> None:
    for outcome in ("promoted", "blocked", "awaiting_consent"):
        rep = _report(outcome, "blocked", ok(CheckKind.LEDGER_CHAIN), bad)
        assert rep.status is RunVerdict.INVALID and not rep.valid
    assert VerifyReport("run-1", outcome="blocked").status is RunVerdict.INVALID  # nothing checked


def _chain(*links: Link) -> ChainResult:
    return ChainResult(passed=not links, links=list(links), head_ref="a" * 40, base_ref="b" * 40, included=["p1"],
                       required_suites=["unit"], human_gate=False, evidence_refs=[], stack_plan_id="plan-1")


def _block(tmp_path: Path, decision_missing: list[str], gate_missing: list[str], chain: ChainResult) -> CheckResult:
    rep = VerifyReport("run-1")
    gate = Record(7, T_GATE, {"missing": gate_missing, "passed": not gate_missing})
    _block_agrees(rep, tmp_path, [gate], {"outcome": "blocked", "missing": decision_missing,
                                          "to_ref": "refs/heads/main"}, chain)
    (check,) = rep.checks
    assert check.kind is CheckKind.BLOCK_AGREES
    return check


def test_a_block_that_names_the_gates_missing_links_agrees(tmp_path: Path) -> None:
    chain = _chain(Link("validation:unit", "missing"))
    assert _block(tmp_path, ["validation:unit: missing"], ["validation:unit: missing"], chain).ok


def test_a_block_whose_reasons_differ_from_the_gate_is_invalid(tmp_path: Path) -> None:
    chain = _chain(Link("validation:unit", "missing"))
    c = _block(tmp_path, ["validation:lint: missing"], ["validation:unit: missing"], chain)
    assert c.status is Status.FAILED and "the gate named ['validation:unit: missing']" in c.detail


def test_a_block_the_re_evaluated_chain_does_not_show_is_invalid(tmp_path: Path) -> None:
    # the gate and the decision agree, but the evidence re-evaluated today misses nothing
    c = _block(tmp_path, ["validation:unit: missing"], ["validation:unit: missing"], _chain())
    assert c.status is Status.FAILED and "the re-evaluated chain misses []" in c.detail


def test_a_block_with_no_reason_or_an_unknown_target_reason_is_invalid(tmp_path: Path) -> None:
    assert "names no reason" in _block(tmp_path, [], [], _chain()).detail
    c = _block(tmp_path, ["target:refs/heads/main: invalid (because I say so)"], [], _chain())
    assert "not a reason dome records" in c.detail


def test_a_target_said_to_have_moved_is_rechecked_with_git(tmp_path: Path) -> None:
    # the decision records no previous target (or one the repository lacks): not shown, not ok
    c = _block(tmp_path, ["target:refs/heads/main: invalid (moved since the base; not an ancestor of the head)"],
               [], _chain())
    assert c.status is Status.FAILED and "does not show it" in c.detail


def _two_lines(repo: Path) -> tuple[str, str]:
    """(tip of a line of history, tip of another line from the same root): neither contains the other."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x", *args],
                              check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    repo.mkdir()
    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "root")
    root = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "head")
    head = git("rev-parse", "HEAD")
    git("reset", "-q", "--hard", root)
    git("commit", "-q", "--allow-empty", "-m", "moved")
    return git("rev-parse", "HEAD"), head


def test_a_target_that_moved_off_the_head_agrees_and_one_that_did_not_is_invalid(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    moved, head = _two_lines(repo)
    reason = "target:refs/heads/main: invalid (moved since the base; not an ancestor of the head)"

    def check(previous: str) -> CheckResult:
        rep = VerifyReport("run-1")
        chain = ChainResult(passed=True, links=[], head_ref=head, base_ref="b" * 40, included=["p1"],
                            required_suites=["unit"], human_gate=False, evidence_refs=[], stack_plan_id="plan-1")
        _block_agrees(rep, repo, [Record(7, T_GATE, {"missing": [], "passed": True})],
                      {"outcome": "blocked", "missing": [reason], "to_ref": "refs/heads/main",
                       "previous_target": previous}, chain)
        (c,) = rep.checks
        return c

    assert check(moved).ok, check(moved).detail          # the recorded target is real and off the head
    assert "does not show it" in check(head).detail      # the head itself: it had not moved away


def test_each_broken_link_of_the_re_evaluated_chain_is_named_with_its_detail() -> None:
    rep = VerifyReport("run-1")
    _chain_links(rep, _chain(Link("validation:unit", "failing", "exit code 1"), Link("consent", "missing"),
                             Link("signature:validation:lint", "invalid", "SIGNATURE_INVALID: bad signature")))
    assert [(c.subject, c.status, c.detail) for c in rep.checks] == [
        ("validation:unit", Status.FAILED, "exit code 1"),
        ("consent", Status.MISSING, "missing"),  # no detail: the status is the reason
        ("signature:validation:lint", Status.FAILED, "SIGNATURE_INVALID: bad signature")]


# -- a run with no promotion decision -----------------------------------------------------------

def _undecided(gate_links: list[dict] | None, *, topics: tuple[str, ...] = (T_GATE, T_CONSENT_REQ),
               signed: bool = True, passed: bool = False, run_status: str | None = "blocked") -> VerifyReport:
    """`_without_decision` over records of these topics in this order; the gate record (when
    one of them) holds these links, each not ok one named in `missing`."""
    key = SigningKey.generate()
    ring = Keyring()
    ring.add(key.public)
    gate = {"artifact_kind": "dome.gate_decision/v1", "links": gate_links or [], "passed": passed,
            "missing": [f"{x['link']}: {x['status']}" for x in gate_links or [] if x["status"] != "ok"]}
    signed_gate = sign_artifact(gate, key) if signed else gate
    records = [Record(seq, topic, signed_gate if topic == T_GATE else {"artifact_kind": "x/v1"})
               for seq, topic in enumerate(topics, start=3)]
    rep = VerifyReport("run-1", run_status=run_status)
    _without_decision(rep, records, ring)
    return rep


CONSENT = {"link": "consent", "status": "missing"}
SUITE = {"link": "validation:unit", "status": "ok"}


def test_a_run_held_for_consent_alone_is_awaiting_consent() -> None:
    rep = _undecided([SUITE, CONSENT])
    assert rep.outcome == "awaiting_consent" and rep.blocked_by == ["consent: missing"]
    assert [(c.kind, c.status) for c in rep.checks] == [(CheckKind.BLOCK_AGREES, Status.OK)]
    assert rep.status is RunVerdict.AWAITING_CONSENT


@pytest.mark.parametrize("links,passed", [
    ([{"link": "validation:unit", "status": "missing"}, CONSENT], False),  # misses more than consent
    ([{"link": "consent", "status": "failed"}], False),                    # consent refused, not missing
    ([{"link": "validation:unit", "status": "missing"}], False),           # no consent link at all
    ([SUITE], False),                                                      # nothing missing
    ([CONSENT], True),                                                     # a gate that says it passed
])
def test_a_consent_request_after_a_gate_that_misses_more_is_invalid(links, passed) -> None:
    rep = _undecided(links, passed=passed)
    assert rep.outcome == "awaiting_consent"
    (check,) = rep.checks
    assert (check.kind, check.status) == (CheckKind.BLOCK_AGREES, Status.FAILED)
    assert "misses more than consent" in check.detail and rep.status is RunVerdict.INVALID


def test_a_held_runs_gate_must_be_signed() -> None:
    (check,) = _undecided([CONSENT], signed=False).checks
    assert (check.kind, check.status) == (CheckKind.BLOCK_AGREES, Status.FAILED)
    assert check.detail.startswith("gate decision: EVIDENCE_UNSIGNED")


@pytest.mark.parametrize("topics,run_status", [
    ((T_CONSENT_REQ, T_GATE), "blocked"),  # the request came before the gate: not held by this gate
    ((T_GATE,), "blocked"),                # a gate and no request, no decision
    ((T_GATE,), "failed"),                 # integration ran, so a decision is owed whatever the end
    ((T_CONSENT_REQ,), "blocked"),         # a request with no gate
    ((), "promoted"),                      # says promoted, nothing recorded
    ((), None),                            # no lifecycle at all
])
def test_a_run_without_a_decision_that_is_not_held_lacks_it(topics, run_status) -> None:
    rep = _undecided([CONSENT], topics=topics, run_status=run_status)
    assert rep.outcome is None
    assert [(c.kind, c.status) for c in rep.checks] == [(CheckKind.PROMOTION_DECISION, Status.MISSING)]


@pytest.mark.parametrize("run_status", ["failed", "cancelled", "completed"])
def test_a_run_that_ended_before_integration_owes_no_decision(run_status) -> None:
    rep = _undecided(None, topics=(), run_status=run_status)
    assert rep.checks == [] and rep.outcome is None


# -- run.finished against the promotion decision ------------------------------------------------

def _agrees(fin: dict, outcome: str, promo_seq: int, *, first: int | None = 10, last: int | None = 10,
            head: str = "h1") -> list[tuple[CheckKind, Status]]:
    """`_finish_agrees` for a run whose run.finished (at `last`) says `fin` and whose decision
    (at `promo_seq`) says `outcome` at `head`; the run's first event is an unrelated one."""
    events = [SimpleNamespace(sequence=1, payload={"status": "promoted", "head": "h1"}),
              SimpleNamespace(sequence=10, payload=fin)]
    promo = Record(promo_seq, T_PROMOTION, {"outcome": outcome, "from_head_ref": head})
    rep = VerifyReport("run-1")
    _finish_agrees(rep, events, first, last, promo)  # type: ignore[arg-type]
    return [(c.kind, c.status) for c in rep.checks]


AGREES, DISAGREES = [(CheckKind.FINISH_AGREES, Status.OK)], [(CheckKind.FINISH_AGREES, Status.FAILED)]


@pytest.mark.parametrize("fin,outcome,promo_seq,head,want", [
    ({"status": "promoted", "head": "h1"}, "promoted", 8, "h1", AGREES),
    ({"status": "promoted", "head": "h2"}, "promoted", 8, "h1", DISAGREES),   # another head
    ({"status": "promoted", "head": "h1"}, "blocked", 8, "h1", DISAGREES),    # the decision did not promote
    ({"status": "promoted", "head": "h1"}, "promoted", 12, "h1", DISAGREES),  # promoted before the decision
    ({"status": "failed", "error": {"code": "REF_MOVED"}}, "promoted", 8, "h1", AGREES),  # the ref would not move
    ({"status": "failed"}, "promoted", 8, "h1", DISAGREES),                   # ... and names no error
    ({"status": "failed", "error": {"code": ""}}, "promoted", 8, "h1", DISAGREES),
    ({"status": "blocked"}, "promoted", 12, "h1", AGREES),                    # `dome promote` after the run
    ({"status": "blocked"}, "promoted", 8, "h1", DISAGREES),                  # a promotion the run hid
    ({"status": "failed"}, "promoted", 12, "h1", AGREES),                     # promoted after a failed run
    ({"status": "blocked"}, "blocked", 8, "h1", []),                          # nothing to agree on
])
def test_run_finished_must_say_what_the_decision_says(fin, outcome, promo_seq, head, want) -> None:
    assert _agrees(fin, outcome, promo_seq, head=head) == want


def test_without_run_finished_there_is_nothing_to_agree_with() -> None:
    assert _agrees({"status": "promoted", "head": "h1"}, "promoted", 8, first=None, last=None) == []
    assert _agrees({"status": "blocked"}, "promoted", 8, first=None) == DISAGREES  # a promote with no finish before it
