"""Every attested byte is re-hashed: a validation log blob changed in place (same
length, one byte) or removed makes `dome verify` and `dome ledger verify` fail,
naming the blob and the record that names it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger import Ledger
from tests.attacks import attack
from tests.conftest import dome_cli
from tests.integration.test_verify_exports import _copy_ops, _verify_here, promoted_run  # noqa: F401 - the fixture


def _log_blob(ops: Path, run_id: str) -> tuple[str, Path]:
    """The digest and file of the final validation report's log."""
    ledger = Ledger.open(None, ops)
    try:
        reports = [e.payload for e in ledger.events(run_id) if e.topic == "integration.validation_report"]
        digest = reports[-1]["artifact_digests"][0]
        return digest, ledger.blobs.path(digest)
    finally:
        ledger.close()


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # same length: a length check cannot see it
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))


@attack("attested-blob-tamper")
@pytest.mark.parametrize("how", ["one-byte", "removed"])
def test_a_changed_or_missing_log_blob_fails_both_verify_commands(promoted_run, tmp_path: Path,  # noqa: F811
                                                                 how: str) -> None:
    ops, run_id, _ = _copy_ops(promoted_run, tmp_path)
    digest, path = _log_blob(ops, run_id)
    size = path.stat().st_size
    if how == "one-byte":
        _flip_one_byte(path)
        assert path.stat().st_size == size
    else:
        path.unlink()
    ver = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    out = json.loads(ver.stdout)
    assert ver.returncode == 1 and not out["valid"], out["reasons"]
    bad = [f for f in out["failures"] if f["kind"] == "attested_blobs"]
    assert [f["subject"] for f in bad] == [digest], out["reasons"]
    assert "integration.validation_report artifact_digests" in bad[0]["detail"], bad
    assert bad[0]["status"] == ("failed" if how == "one-byte" else "missing")
    assert _verify_here(ops, run_id)["failures"] == out["failures"]  # in process too, where coverage sees it
    led = dome_cli("ledger", "verify", "--ops-root", str(ops), "--json")
    rep = json.loads(led.stdout)
    assert led.returncode == 1, led.stdout[-2000:]
    codes = {p["code"]: p for p in rep["problems"]}
    code = "BLOB_CHANGED" if how == "one-byte" else "BLOB_MISSING"
    assert code in codes and codes[code]["details"]["digest"] == digest, rep["problems"]
    assert "integration.validation_report" in codes[code]["details"]["named_by"]


def test_an_untouched_run_has_every_named_blob_checked(promoted_run, tmp_path: Path) -> None:  # noqa: F811
    ops, run_id, _ = _copy_ops(promoted_run, tmp_path)
    out = json.loads(dome_cli("verify", run_id, "--ops-root", str(ops), "--json").stdout)
    assert out["valid"] and "attested_blobs" in {c["kind"] for c in out["checks"]}, out["reasons"]
    assert dome_cli("ledger", "verify", "--ops-root", str(ops), "--json").returncode == 0


def test_the_blobs_a_record_names_are_found_at_any_depth() -> None:
    from coordinator.integration.blob_refs import record_blobs, statement_blobs
    d = ["sha256:" + c * 64 for c in "abcdef"]
    refs = record_blobs(3, "patch.submitted", {"proposal": {"diff_ref": d[0]}, "diff_ref": d[1],
                                                "stack": {"list_chain": {"head": d[2], "count": 70}},
                                                "diff_digest": d[3]})  # a digest, not a blob name
    assert sorted(r.digest for r in refs) == sorted(d[:3]) and {r.sequence for r in refs} == {3}
    assert [r.digest for r in record_blobs(1, "artifact.put", {"digest": d[4]})] == [d[4]]
    assert record_blobs(1, "task.progress", {"digest": d[4]}) == []
    subs = statement_blobs([{"subject": [{"name": "git+commit:x", "digest": {"gitCommit": "x"}},
                                         {"name": f"artifact:{d[5]}", "digest": {"sha256": "f" * 64}},
                                         {"name": "diff:pp-1:split-a", "digest": {"sha256": "e" * 64}}]}])
    assert [s.digest for s in subs] == [d[5]]


def test_a_removed_chunk_of_a_records_list_is_named_by_verify(tmp_path: Path) -> None:
    """A long list of an integration record is held as a chain of chunk blobs: one removed is
    named by `dome verify` as a broken chain of that record, beside the missing blob."""
    from coordinator.integration.evidence import T_GATE
    from coordinator.integration.verify import CheckKind, verify_run
    from coordinator.keys import load_keyring
    from coordinator.integration.listchain import CHUNK
    from tests.scale.test_record_chain import _emit
    ops = tmp_path / "ops"
    with Ledger.open(None, ops) as ledger:
        _emit(ledger, ops, 2 * CHUNK, "run-c")
        gate = next(e for e in ledger.events("run-c") if e.topic == T_GATE)
        head = gate.payload["links"]["list_chain"]["head"]
        ledger.blobs.path(head).unlink()
        rep = verify_run(ledger, "run-c", load_keyring(ops))
    broken = [(f.detail.split(":")[0], f.subject) for f in rep.failures if f.kind == CheckKind.LIST_CHAIN]
    assert broken == [("LIST_CHAIN_BROKEN", f"#{gate.sequence} {T_GATE}")], rep.reasons()
    assert (CheckKind.BLOBS, head) in {(f.kind, f.subject) for f in rep.failures}
