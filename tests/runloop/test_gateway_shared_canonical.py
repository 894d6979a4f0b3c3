"""coordinator.shared_canonical assembles a value's canonical bytes from parts serialized
earlier in the same scope; the bytes must be canonical_json's, whatever the values, the
parts shared between them and the order they are serialized in."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator import shared_canonical as sc
from registry.canonical import canonical_json

keys = st.one_of(st.sampled_from(["a", "b", "carried", "proposal", "z", "A", "_", "a b", 'q"', "é", "\u2028", "𝄞"]),
                 st.text(max_size=4))
leaves = (st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False)
          | st.text(max_size=6))
json_values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(keys, inner, max_size=9), max_leaves=30)


@st.composite
def sharing(draw: Any) -> list[Any]:
    """Values built from a pool of containers that several of them hold (by identity)."""
    pool = [draw(st.dictionaries(keys, json_values, min_size=0, max_size=10)) for _ in range(draw(st.integers(1, 3)))]
    pool += [draw(st.lists(json_values, max_size=3))]
    part = st.one_of(json_values, st.sampled_from(pool))
    values: list[Any] = list(pool)
    for _ in range(draw(st.integers(1, 4))):
        inner = draw(st.dictionaries(keys, part, max_size=6))
        values.append(draw(st.sampled_from([inner, [inner, draw(part)], {"carried": [{"arguments": inner}],
                                                                           "k": draw(part)}])))
    return draw(st.permutations(values))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=sharing())
def test_shared_parts_give_canonical_json_bytes_in_any_order(values: list[Any]) -> None:
    expected = [canonical_json(copy.deepcopy(v)) for v in values]
    with sc.shared():
        got = [sc.canonical(v) for v in values]
        again = [sc.canonical(v) for v in values]  # every value now known or assembled from known parts
    assert got == expected and again == expected


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_outside_a_scope_it_is_canonical_json(value: Any) -> None:
    assert sc.canonical(value) == canonical_json(value)


def test_a_request_shaped_value_reuses_the_proposal_and_matches() -> None:
    proposal = {f"f{i}": {"x": [i, i / 3, "s" * i]} for i in range(12)}
    submit = {"idempotency_key": "k-1", "node_execution_id": "ne-1", "proposal": proposal}
    carrier = {"idempotency_key": "k-2", "outcome": "succeeded", "summary": {}, "evidence": [],
               "carried": [{"tool": "put_artifact", "proof": "p1", "arguments": {"content_b64": "eA=="}},
                           {"tool": "submit_patch", "proof": "p2", "arguments": dict(submit)}]}
    record = {"node_execution_id": "ne-1", "proposal": proposal, "method": "submit_patch"}
    with sc.shared():
        assert sc.canonical(dict(submit)) == canonical_json(submit)
        assert id(proposal) in sc._local.memo  # a large object is remembered on its own
        assert sc.canonical(carrier) == canonical_json(carrier)
        assert sc.canonical(record) == canonical_json(record)
    assert sc._local.memo is None  # nothing outlives the scope


def test_a_value_canonical_json_refuses_is_refused_inside_a_scope_too() -> None:
    import pytest as _pytest
    from registry.errors import CanonicalizationError
    big = {"a": {str(i): i for i in range(9)}, "b": 2**60}
    with sc.shared():
        with _pytest.raises(CanonicalizationError):
            sc.canonical(big)
        with _pytest.raises(CanonicalizationError):
            sc.canonical({"x": big["a"], "y": float("nan")})


def test_scopes_are_per_thread_and_nest() -> None:
    import threading
    seen: list[Any] = []
    with sc.shared():
        with sc.shared():
            sc.canonical({"a": {str(i): i for i in range(9)}})
        assert sc._local.memo  # the inner scope joined the outer one
        t = threading.Thread(target=lambda: seen.append(getattr(sc._local, "memo", None)))
        t.start()
        t.join()
    assert seen == [None]


# -- through the gateway: the carrier's proof covers the carried arguments as sent ----------------
import json  # noqa: E402

import pytest  # noqa: E402

from coordinator import runstate as rs  # noqa: E402
from registry.errors import DomeError  # noqa: E402
from tests.runloop.test_gateway_carried import RUN, env  # noqa: E402,F401 - the carried-call fixture


def test_a_carriers_proof_over_other_carried_arguments_is_refused(env):
    """The worker's proof for complete_task was made over one proposal; the request carries
    another, with a fresh proof of its own for the carried call. The carried call passes its own
    check, and the carrier, whose canonical arguments are assembled from the carried call's
    serialized parts, must still be refused: its proof is not over what was sent."""
    gw, writer, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-swap")
    signed_over = {**p, "summary": "what the proof was made over"}
    genuine = c._proof

    def proof(name, args):
        if name != "complete_task":
            return genuine(name, args)
        seen = json.loads(json.dumps(args))
        seen["carried"][1]["arguments"]["proposal"] = signed_over
        return genuine(name, seen)
    c._proof = proof
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    pid = c.submit_patch_carried(p)
    n = len(ledger.events(RUN))
    with pytest.raises(DomeError) as ei:
        c.complete_task("succeeded", summary={}, proposal_id=pid)
    assert ei.value.code in ("GRANT_PROOF_INVALID", "GRANT_PROOF_MISMATCH")
    topics = [e.topic for e in ledger.events(RUN)[n:]]
    assert rs.TASK_COMPLETED not in topics and "grant.rejected" in topics
    assert topics.count(rs.PATCH_SUBMITTED) == 1  # the carried calls stand, as separate requests would
    c._proof = genuine


def test_the_records_of_a_request_hold_canonical_payload_bytes(env):
    """Records whose payload bytes were assembled from shared parts verify like any other."""
    gw, writer, _, attempt, ledger = env
    c, p, d, _ = attempt("ne-bytes")
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    pid = c.submit_patch_carried(p)
    c.complete_task("succeeded", summary={"ok": True}, proposal_id=pid)
    mine = [e for e in ledger.events(RUN) if e.node_execution_id == "ne-bytes"]
    submitted = next(e for e in mine if e.topic == rs.PATCH_SUBMITTED)
    assert submitted.payload["proposal"] == p
    for e in mine:
        assert canonical_json(e.payload) in e.record_bytes
    assert ledger.verify().ok


def test_a_diff_stored_in_the_same_request_is_not_read_back_and_others_are(env, monkeypatch):
    """submit_patch takes the diff its request's put_artifact just stored from memory (its digest
    was computed from those bytes); a diff stored earlier is read from the blob store, which
    checks its digest: a blob changed on disk is still refused."""
    gw, _, _, attempt, ledger = env
    backend = gw.dispatcher.specs["put_artifact"].handler.args[0]
    reads: list[str] = []
    real_get = backend.blobs.get
    monkeypatch.setattr(backend.blobs, "get", lambda digest: reads.append(digest) or real_get(digest))
    c, p, d, _ = attempt("ne-fresh")
    c.put_artifact_carried(d, "text/x-diff", "patch.diff")
    c.submit_patch(p)
    assert reads == [] and p["diff_ref"] not in backend.fresh  # taken once
    c2, p2, d2, _ = attempt("ne-stale", path="out/b.txt")
    c2.put_artifact(d2, "text/x-diff", "patch.diff")
    backend.fresh.clear()  # as after other requests
    path = backend.blobs.path(p2["diff_ref"])
    path.chmod(0o644)
    path.write_bytes(d2 + b"tampered\n")
    with pytest.raises(DomeError) as ei:
        c2.submit_patch(p2)
    assert reads == [p2["diff_ref"]] and ei.value.code == "BLOB_DIGEST_MISMATCH"
