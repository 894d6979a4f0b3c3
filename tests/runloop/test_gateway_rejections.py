"""Refused grants at the worker gateway (real SDK server on a Unix socket,
real ledger, real grants): tools/list answers a forged, spent or foreign
grant with the same typed error a call gets (no traceback), and rejected
calls grow the ledger by a bounded number of events."""
from __future__ import annotations

import base64
import logging

import pytest

from coordinator.gateway.ratelimit import RejectionLimiter, Verdict
from registry.errors import DomeError
from registry.toolprofile import envelope_to_token
from tests.runloop.test_gateway import RUN, client, gateway  # noqa: F401 - the gateway fixture
from tests.attacks import attack


def _forged(grant) -> str:
    env = dict(grant.envelope)
    env["payload"] = base64.b64encode(base64.b64decode(env["payload"]).replace(b'"w0001"', b'"w0002"')).decode()
    return envelope_to_token(env)


def _list_with(gw, grant, token: str) -> DomeError:
    c = client(gw, grant)
    c.token = token
    with pytest.raises(DomeError) as ei:
        c.list_tools()
    return ei.value


@attack("forged-grant")
def test_tools_list_refuses_bad_grants_with_the_typed_error_of_a_call(gateway, caplog, capfd) -> None:
    gw, writer, verifier, attempt, ledger = gateway
    g = attempt("ne-l1")
    caplog.set_level(logging.DEBUG)
    # forged: the same code a call gets
    forged = _forged(g)
    err = _list_with(gw, g, forged)
    c = client(gw, g)
    c.token = forged
    with pytest.raises(DomeError) as call_err:
        c.report_progress(0.1)
    assert err.code == call_err.value.code == "GRANT_SIGNATURE_INVALID"
    assert err.retry == call_err.value.retry and err.hints == call_err.value.hints
    # revoked
    ledger.revoke(jti=g.profile["jti"], run_id=RUN, reason="test")
    assert _list_with(gw, g, g.token).code == "GRANT_REVOKED"
    # foreign: a grant of another run (signed by the same key)
    from coordinator.gateway import auth as grants_io
    other, _ = grants_io.issue(key=writer.signer, run_id="run-other", wave_id="w0001", node_id="n1",
                               node_execution_id="ne-o1", capabilities=["write"], ttl_s=60, policy_id="default",
                               seed=1, inputs_hash="sha256:" + "0" * 64)
    foreign = _list_with(gw, g, other.token)
    assert foreign.code.startswith("GRANT_") and "run" in foreign.message.lower()
    out, errtext = capfd.readouterr()
    assert "Traceback" not in errtext and "Traceback" not in caplog.text
    assert "-32603" not in caplog.text and "Internal server error" not in caplog.text


@attack("forged-grant")
def test_a_spent_grant_is_refused_by_tools_list(gateway) -> None:
    gw, writer, verifier, attempt, ledger = gateway
    g = attempt("ne-s1")
    c = client(gw, g)
    c.complete_task("succeeded", summary={"ok": True})
    assert _list_with(gw, g, g.token).code == "GRANT_REPLAYED"


@attack("rejection-flood")
def test_300_forged_calls_grow_the_ledger_by_a_bounded_number_of_events(gateway) -> None:
    gw, writer, verifier, attempt, ledger = gateway
    g = attempt("ne-f1")
    limiter = gw.limiter
    before = len(ledger.events(RUN))
    c = client(gw, g)
    c.token = _forged(g)
    codes = []
    for i in range(300):
        c.budgets = {}
        c.used = {"calls": 0, "bytes": 0, "by_method": {}}
        try:
            c.report_progress(i / 300)
        except DomeError as exc:
            codes.append((exc.code, exc.retry, exc.details.get("retry_after_s")))
    assert len(codes) == 300
    n = limiter.per_subject
    assert [c[0] for c in codes[:n]] == ["GRANT_SIGNATURE_INVALID"] * n
    assert {c[0] for c in codes[n:]} == {"RATE_LIMITED"}
    assert all(r == "light" and after is not None and after > 0 for _, r, after in codes[n:])
    gw.flush_rejections()
    grown = ledger.events(RUN)[before:]
    topics = [e.topic for e in grown]
    assert topics.count("grant.rejected") == n
    assert topics.count("grant.rejections_limited") == 1
    assert topics.count("grant.rejections_summary") == 1
    assert len(grown) == n + 2  # was 300
    summary = next(e.payload for e in grown if e.topic == "grant.rejections_summary")
    assert summary["refused"] == 300 - n and summary["by_code"] == {"GRANT_SIGNATURE_INVALID": 300 - n}
    # an honest attempt is not limited by someone else's rejections
    honest = client(gw, attempt("ne-f2"))
    assert honest.report_progress(0.5)


@attack("rejection-flood")
def test_forged_calls_naming_many_attempts_are_bounded_in_aggregate(gateway) -> None:
    gw, writer, verifier, attempt, ledger = gateway
    grants = [attempt(f"ne-m{k}") for k in range(12)]
    before = len(ledger.events(RUN))
    for g in grants:
        c = client(gw, g)
        c.token = _forged(g)
        for _ in range(25):
            c.budgets = {}
            c.used = {"calls": 0, "bytes": 0, "by_method": {}}
            with pytest.raises(DomeError):
                c.report_progress(0.1)
    gw.flush_rejections()
    grown = [e.topic for e in ledger.events(RUN)[before:]]
    lim = gw.limiter
    assert grown.count("grant.rejected") == lim.aggregate
    assert len(grown) <= lim.aggregate + lim.aggregate // lim.per_subject + 2


def test_limiter_windows_and_bounds() -> None:
    lim = RejectionLimiter(per_subject=3, aggregate=5, window_s=10)
    lim.roll(1000.0)
    verdicts = [lim.judge("a", "X", 1000.0) for _ in range(5)]
    assert verdicts == [Verdict.RECORD] * 3 + [Verdict.LIMIT, Verdict.REFUSE]
    assert [lim.judge("b", "X", 1001.0) for _ in range(3)] == [Verdict.RECORD, Verdict.RECORD, Verdict.LIMIT]
    assert lim.judge("c", "X", 1001.0) is Verdict.REFUSE  # aggregate limit reached
    assert lim.retry_after(1004.0) == 6.0
    assert lim.roll(1005.0) is None
    ended = lim.roll(1012.0)
    assert ended == {"X": 4}
    assert lim.judge("a", "X", 1012.0) is Verdict.RECORD


def test_no_rejection_is_recorded_after_run_finished(gateway) -> None:
    """After run.finished only signed records may follow (dome verify refuses others):
    late rejections are answered with their typed error and not recorded."""
    from coordinator import runstate as rs
    gw, writer, verifier, attempt, ledger = gateway
    g = attempt("ne-late")
    writer.append(rs.RUN_FINISHED, {"status": "failed"}, signed=True)
    before = len(ledger.events(RUN))
    c = client(gw, g)
    c.token = _forged(g)
    with pytest.raises(DomeError) as ei:
        c.report_progress(0.1)
    assert ei.value.code == "GRANT_SIGNATURE_INVALID"
    assert _list_with(gw, g, c.token).code == "GRANT_SIGNATURE_INVALID"
    gw.flush_rejections()
    assert len(ledger.events(RUN)) == before


def test_a_new_window_counts_the_last_one_and_records_again(gateway) -> None:
    import time
    gw, writer, verifier, attempt, ledger = gateway
    gw.limiter = RejectionLimiter(per_subject=2, aggregate=50, window_s=0.5)
    g = attempt("ne-w1")
    c = client(gw, g)
    c.token = _forged(g)

    def forged_call() -> str:
        c.budgets = {}
        c.used = {"calls": 0, "bytes": 0, "by_method": {}}
        with pytest.raises(DomeError) as ei:
            c.report_progress(0.1)
        return ei.value.code

    before = len(ledger.events(RUN))
    first = [forged_call() for _ in range(5)]
    assert first == ["GRANT_SIGNATURE_INVALID"] * 2 + ["RATE_LIMITED"] * 3
    time.sleep(0.6)
    assert forged_call() == "GRANT_SIGNATURE_INVALID"  # a new window records again
    grown = [(e.topic, e.payload) for e in ledger.events(RUN)[before:]]
    assert [t for t, _ in grown] == ["grant.rejected", "grant.rejected", "grant.rejections_limited",
                                     "grant.rejections_summary", "grant.rejected"]
    assert grown[3][1]["refused"] == 3
