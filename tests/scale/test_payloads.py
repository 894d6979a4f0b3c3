"""No event payload grows with N: run.finished keeps its proposal lists in the blob store
by digest, a 10,000-proposal finish fits where the inline lists did not, and dome verify
checks the blob (present, intact, counts and included proposals agreeing)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coordinator.run_payloads import LISTS_REF, finish_lists, offload_finish_lists
from ledger import MAX_PAYLOAD_BYTES, Ledger
from registry.canonical import canonical_json
from registry.errors import DomeError
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, run_queue, write_queue


def _finish_payload(n: int) -> dict:
    ids = [f"pp-{i:024x}" for i in range(n)]
    return {"status": "promoted", "head": "a" * 40, "promoted_ref": "refs/heads/out", "missing": [],
            "proposals": ids, "included_proposals": ids, "counts": {"succeeded": n, "attempts": n},
            "finished_at": "2026-11-25T00:00:00Z", "reason": None}


def test_finish_payload_size_does_not_depend_on_n(tmp_path: Path) -> None:
    with Ledger.open(None, tmp_path / "ops") as ledger:
        sizes = {}
        for n in (10, 1_000, 10_000):
            payload = offload_finish_lists(ledger.blobs, _finish_payload(n))
            sizes[n] = len(canonical_json(payload))
            assert finish_lists(ledger.blobs, payload)["proposals"] == _finish_payload(n)["proposals"]
        # only the digits of the four counts grow (3 more digits each from 10 to 10,000)
        assert max(sizes.values()) < 1024 and sizes[10_000] - sizes[10] == 4 * 3, sizes
        # inline, 10,000 proposals are over the ledger's payload limit; by digest they fit
        inline = _finish_payload(10_000)
        assert len(canonical_json(inline)) > MAX_PAYLOAD_BYTES
        with pytest.raises(DomeError) as info:
            ledger.append("run-big", "run.finished", inline)
        assert info.value.code == "PAYLOAD_TOO_LARGE"
        rec = ledger.append("run-big", "run.finished", offload_finish_lists(ledger.blobs, inline))
        assert len(finish_lists(ledger.blobs, rec.payload)["included_proposals"]) == 10_000


def test_finish_lists_refuse_a_blob_that_disagrees(tmp_path: Path) -> None:
    with Ledger.open(None, tmp_path / "ops") as ledger:
        payload = offload_finish_lists(ledger.blobs, _finish_payload(3))
        with pytest.raises(ValueError):
            finish_lists(ledger.blobs, {**payload, "proposal_count": 2})
        other = ledger.blobs.put(b'{"proposals":[]}')
        with pytest.raises(ValueError):
            finish_lists(ledger.blobs, {**payload, LISTS_REF: other})
        with pytest.raises(DomeError):  # BlobNotFound
            finish_lists(ledger.blobs, {**payload, LISTS_REF: "sha256:" + "0" * 64})
        assert finish_lists(ledger.blobs, _finish_payload(2))["proposals"] == ["pp-" + "0" * 24, "pp-" + "0" * 23 + "1"]


@pytest.mark.slow
def test_a_real_run_keeps_its_lists_by_digest_and_verify_checks_them(git_repo, ops_root, ledger_env, tmp_path):
    tasks = [cmd_task(f"t{i}", f"echo {i} > out{i}.txt") for i in range(3)]
    q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 3, "endgame_max_duplicates": 0})
    from coordinator.runloop.finish import integration_finish
    _, out = run_queue(q, ops_root, ledger_env, sandbox="none", finish=integration_finish)
    assert out.status == "promoted", out
    ledger = ledger_env[0]
    fin = [e for e in ledger.events(out.run_id) if e.topic == "run.finished"][-1].payload
    assert "proposals" not in fin and "included_proposals" not in fin
    assert fin["proposal_count"] == 3 and fin["included_count"] == 3
    lists = finish_lists(ledger.blobs, fin)
    assert len(lists["proposals"]) == 3 and sorted(lists["included_proposals"]) == sorted(lists["proposals"])

    def verify() -> tuple[int, dict]:
        proc = dome_cli("verify", out.run_id, "--ops-root", str(ops_root), "--json", timeout=300)
        return proc.returncode, json.loads(proc.stdout)

    rc, rep = verify()
    assert rc == 0 and rep["valid"], rep
    assert any(c["kind"] == "run_finished_lists" and c["status"] == "ok" for c in rep["checks"]), rep["checks"]
    blob = ledger.blobs.path(fin[LISTS_REF])
    good = blob.read_bytes()
    os.chmod(blob, 0o644)
    blob.write_bytes(good.replace(b"pp-", b"pq-", 1))  # one proposal id changed
    rc, rep = verify()
    bad = [c for c in rep["checks"] if c["kind"] == "run_finished_lists"]
    assert rc == 1 and not rep["valid"] and bad and bad[0]["status"] == "failed", bad
    blob.unlink()  # and gone
    rc, rep = verify()
    assert rc == 1 and [c["status"] for c in rep["checks"] if c["kind"] == "run_finished_lists"] == ["failed"]


def test_checkpoint_payload_does_not_list_the_whole_stack() -> None:
    """Each checkpoint names its own layers; the head's whole stack only by count and digest,
    so the checkpoints of an N-proposal run cost O(N) ledger bytes, not O(N^2)."""
    from coordinator.integration.canvas import Checkpoint
    from registry.canonical import digest_json

    def cp(n: int) -> dict:
        ids = tuple(f"pp-{i:024x}" for i in range(n))
        return Checkpoint(f"cp-{n}", n, "c" * 40, "d" * 40, "e" * 40, ids[-1:], ids).to_dict()

    small, big = cp(10), cp(10_000)
    assert big["included_count"] == 10_000 and big["included_digest"] == digest_json(
        [f"pp-{i:024x}" for i in range(10_000)])
    assert len(canonical_json(big)) - len(canonical_json(small)) <= 10  # digits of the index and count
