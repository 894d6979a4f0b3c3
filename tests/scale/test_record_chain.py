"""Integration records stay the same size whatever the run's size: long lists
(stack plan layers, selection entries, the proposals a report or decision
covers, the gate's links and evidence references) are held as a hash chain of
fixed-size chunks in the blob store; readers rebuild them, and a dropped,
altered or re-linked chunk is a typed error (LIST_CHAIN_BROKEN) that
`dome verify` reports."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.integration import listchain
from coordinator.integration.evidence import T_GATE, T_PLAN, verify_artifact
from coordinator.integration.listchain import CHUNK, ListChainBroken, load_lists, read_list, store_lists
from coordinator.integration.recorder import Emitter, records_of
from coordinator.keys import load_keyring, load_or_create_signing_key
from ledger import Ledger
from ledger.blobs import BlobStore
from registry.canonical import canonical_json
from registry.errors import SignatureError
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def _entries(n: int) -> list[dict]:
    return [{"proposal_id": f"pp-{i:024x}", "diff_digest": "sha256:" + f"{i:064x}", "layer": i}
            for i in range(n)]


def _emit(ledger: Ledger, ops: Path, n: int, run_id: str) -> None:
    key = load_or_create_signing_key(ops)
    emit = Emitter(ledger, run_id, key, lambda: "2026-11-25T00:00:00Z")
    ids = [e["proposal_id"] for e in _entries(n)]
    emit(T_PLAN, {"stack_plan_id": f"sp-{run_id}", "base_ref": "b" * 40, "ordered_proposals": _entries(n),
                  "selection_scores": [{"proposal_id": p, "score": 1} for p in ids]})
    emit(T_GATE, {"decision_id": f"gate-{run_id}", "passed": True, "head_ref": "c" * 40,
                  "included_proposals": ids,
                  "links": [{"link": f"apply_result:{p}", "status": "ok", "detail": "", "refs": []} for p in ids],
                  "evidence_refs": [{"kind": "dome.apply_result/v1", "object_id": p, "digest": "sha256:" + "0" * 64,
                                     "event_sequence": i} for i, p in enumerate(ids)]})


def test_records_for_10000_proposals_are_constant_size_and_verify(tmp_path: Path) -> None:
    ops = tmp_path / "ops"
    with Ledger.open(None, ops) as ledger:
        load_or_create_signing_key(ops)
        keyring = load_keyring(ops)
        sizes: dict[int, dict[str, int]] = {}
        for n in (100, 1_000, 10_000):
            run = f"run-{n}"
            _emit(ledger, ops, n, run)
            sizes[n] = {e.topic: len(canonical_json(e.payload)) for e in ledger.events(run)}
            faults: list = []
            recs = records_of(ledger, run, faults)
            assert not faults
            plan, gate = recs
            assert [e["proposal_id"] for e in plan.artifact["ordered_proposals"]] == \
                [e["proposal_id"] for e in _entries(n)]
            assert len(gate.artifact["links"]) == n and len(gate.artifact["evidence_refs"]) == n
            for r in recs:
                verify_artifact(r.artifact, keyring)  # the signature covers the rebuilt lists
        for topic in (T_PLAN, T_GATE):
            # only the digits of the counts and ids differ: no record grows with N
            assert sizes[10_000][topic] - sizes[100][topic] < 64, sizes
            assert sizes[10_000][topic] < 2048, sizes
        # and every chunk is a blob of at most CHUNK entries
        chunks = [p for p in (ops / "blobs").rglob("*") if p.is_file()]
        assert chunks and max(p.stat().st_size for p in chunks) < CHUNK * 400


def _chain(ledger: Ledger, n: int) -> dict:
    return store_lists({"items": list(range(n))}, ledger.blobs.put, chunk=4)["items"]


def _walk(ledger: Ledger, ref: dict) -> list[str]:
    """The chunk digests from the head back to the first chunk."""
    out, d = [], ref["list_chain"]["head"]
    while d:
        out.append(d)
        d = json.loads(ledger.blobs.get(d))["prev"]
    return out


def test_a_dropped_altered_or_relinked_chunk_is_a_typed_error(tmp_path: Path) -> None:
    with Ledger.open(None, tmp_path / "ops") as ledger:
        ref = _chain(ledger, 18)  # 5 chunks
        assert read_list(ref, ledger.blobs.get) == list(range(18))
        digests = _walk(ledger, ref)
        assert len(digests) == 5

        # re-linked: a chain that skips the middle chunk (every blob valid) is caught by its indexes
        mid = json.loads(ledger.blobs.get(digests[2]))
        after = json.loads(ledger.blobs.get(digests[1]))
        relinked = ledger.blobs.put(canonical_json({**after, "prev": mid["prev"]}))
        head = json.loads(ledger.blobs.get(digests[0]))
        new_head = ledger.blobs.put(canonical_json({**head, "prev": relinked}))
        with pytest.raises(ListChainBroken) as info:
            read_list({"list_chain": {**ref["list_chain"], "head": new_head}}, ledger.blobs.get, "items")
        assert info.value.code == "LIST_CHAIN_BROKEN"
        # a record that claims more or fewer entries than its chain holds
        with pytest.raises(ListChainBroken):
            read_list({"list_chain": {**ref["list_chain"], "count": 17}}, ledger.blobs.get)
        with pytest.raises(ListChainBroken):
            read_list({"list_chain": {**ref["list_chain"], "chunks": 4}}, ledger.blobs.get)

        # altered in place: the blob no longer hashes to its digest
        path = ledger.blobs.path(digests[3])
        os.chmod(path, 0o644)
        path.write_bytes(path.read_bytes().replace(b"[4,", b"[5,"))
        with pytest.raises(ListChainBroken) as info:
            read_list(ref, ledger.blobs.get)
        assert "BLOB_DIGEST_MISMATCH" in info.value.message
        # dropped
        path.unlink()
        with pytest.raises(ListChainBroken):
            read_list(ref, ledger.blobs.get)
        # a head that is not a digest at all
        with pytest.raises(ListChainBroken):
            read_list({"list_chain": {**ref["list_chain"], "head": "not-a-digest"}}, ledger.blobs.get)


_json = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=6)


@settings(max_examples=40, deadline=None)
@given(items=st.lists(_json, max_size=40), chunk=st.integers(1, 9), other=st.lists(st.integers(-2**40, 2**40), max_size=5))
def test_any_list_comes_back_as_it_went_in(items, chunk, other) -> None:
    """Chained or not, every top-level list of an artifact reads back equal, and only
    lists longer than a chunk are chained (in ceil(n / chunk) chunks)."""
    with tempfile.TemporaryDirectory() as d:
        blobs = BlobStore(d)
        art = {"a": items, "b": other, "c": "x"}
        stored = store_lists(art, blobs.put, chunk=chunk)
        assert load_lists(stored, blobs.get) == art
        for k in ("a", "b"):
            if len(art[k]) > chunk:
                assert stored[k]["list_chain"]["chunks"] == -(-len(art[k]) // chunk)
            else:
                assert stored[k] == art[k]


def test_a_broken_chain_leaves_a_record_whose_signature_fails(tmp_path: Path) -> None:
    ops = tmp_path / "ops"
    with Ledger.open(None, ops) as ledger:
        _emit(ledger, ops, 3 * CHUNK, "run-x")
        gate = [e for e in ledger.events("run-x") if e.topic == T_GATE][0].payload
        blob = ledger.blobs.path(gate["links"]["list_chain"]["head"])
        blob.unlink()
        faults: list = []
        recs = records_of(ledger, "run-x", faults)
        assert [f[1].code for f in faults] == ["LIST_CHAIN_BROKEN"] and "gate.computed" in faults[0][0]
        with pytest.raises(SignatureError):
            verify_artifact(recs[1].artifact, load_keyring(ops))
        verify_artifact(recs[0].artifact, load_keyring(ops))  # the plan's chains are intact


def test_only_chained_topics_are_read_as_chains(tmp_path: Path) -> None:
    """A record of another topic whose field looks like a chain reference (say, one
    a worker's payload carried) is neither followed nor reported as a broken chain."""
    ops = tmp_path / "ops"
    with Ledger.open(None, ops) as ledger:
        _emit(ledger, ops, 2 * CHUNK, "run-y")
        gate = [e for e in ledger.events("run-y") if e.topic == T_GATE][0].payload
        lookalike = {"proposal_id": "pp-1", "files": gate["links"], "other": {"list_chain": {"head": "sha256:" + "0" * 64,
                                                                                            "count": 1, "chunks": 1}}}
        ledger.append("run-y", "patch.submitted", lookalike)
        faults: list = []
        recs = records_of(ledger, "run-y", faults)
        assert not faults and dict(recs[-1].artifact) == lookalike


def test_a_real_run_with_chained_lists_verifies_and_reports(git_repo, ops_root, ledger_env, tmp_path,
                                                            monkeypatch) -> None:
    """A run whose lists are longer than a chunk (chunks of 2 here, so 5 tasks do it):
    its integration records hold chain references, `dome verify` and the report
    rebuild them, and a dropped chunk makes `dome verify` fail with LIST_CHAIN_BROKEN."""
    monkeypatch.setattr(listchain, "CHUNK", 2)
    tasks = [cmd_task(f"t{i}", f"echo {i} > out{i}.txt") for i in range(5)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 3, "endgame_max_duplicates": 0})
    from coordinator.runloop.finish import integration_finish
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    ledger = ledger_env[0]
    chained = {e.topic: e.payload for e in ledger.events(out.run_id)
               if isinstance(e.payload, dict) and listchain.has_refs(e.payload)}
    assert {T_PLAN, T_GATE, "promotion.computed"} <= set(chained), sorted(chained)

    from coordinator.report.build import build_model
    events = [json.loads(json.dumps(r.to_json())) for r in ledger.events(out.run_id)]
    from coordinator.integration.recorder import readable_payload
    for e in events:
        e["payload"] = readable_payload(e["topic"], e["payload"], ledger.blobs)
    model = build_model(out.run_id, events)
    assert len([link for link in model.gate["links"] if link["link"].startswith("apply_result:")]) == 5

    # the run's reasons (`dome status`, `dome run`) read the rebuilt records; the raw ones read
    # without the blob store still count the layers and proposals
    from coordinator.cli.status_cmd import run_reasons
    from coordinator.report.explain import explain
    assert run_reasons(ledger, out.run_id)["gate_passed"] is True
    raw = explain(out.run_id, [e.to_json() for e in ledger.events(out.run_id)])
    assert any(d.kind == "plan" and "5 layer(s)" in d.text for d in raw.decisions), raw.decisions
    assert any(d.kind == "validation" and "on 5 proposal(s)" in d.text for d in raw.decisions), raw.decisions

    def verify() -> tuple[int, dict]:
        proc = dome_cli("verify", out.run_id, "--ops-root", str(ops_root), "--json", timeout=300)
        return proc.returncode, json.loads(proc.stdout)

    rc, rep = verify()
    assert rc == 0 and rep["valid"], [c for c in rep["checks"] if c["status"] != "ok"]
    ref = chained[T_GATE]["evidence_refs"]["list_chain"]
    first = ref["head"]
    while (prev := json.loads(ledger.blobs.get(first))["prev"]) is not None:
        first = prev
    ledger.blobs.path(first).unlink()  # the evidence list's first link
    rc, rep = verify()
    bad = [c for c in rep["checks"] if c["kind"] == "list_chain"]
    assert rc == 1 and not rep["valid"] and bad and bad[0]["status"] == "failed", bad
    assert "LIST_CHAIN_BROKEN" in bad[0]["detail"] and "gate.computed" in bad[0]["subject"]
