"""A checked proposal keeps no diff in memory once its canonical diff is stored: each
step that applies it reads it back from the blob store, and what it reads must be the
bytes every gate checked, or nothing of it is applied."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator.integration import finish as ifinish
from coordinator.integration import gitio
from coordinator.integration.policy import IntegrationPolicy
from coordinator.integration.proposals import DiffReloadError
from coordinator.integration.recorder import Emitter
from ledger import Ledger
from registry import diffs
from registry.errors import DomeError
from registry.signing import SigningKey
from tests.integration.conftest import edit_line, head, make_proposal

RUN = "run-released"
KEY = SigningKey(b"\x07" * 32)


def _checked(big_repo: Path, ops: Path, ledger: Ledger) -> tuple[dict, dict[str, bytes]]:
    props = [make_proposal(big_repo, "a", edit_line("f03.txt", 10, "A")),
             make_proposal(big_repo, "b", edit_line("f07.txt", 20, "B"))]
    raw = {p["proposal_id"]: d for p, d in props}
    ctx = ifinish.FinishContext(run_id=RUN, repo=big_repo, base_ref=head(big_repo), proposals=[p for p, _ in props],
                                ledger=ledger, signing_key=KEY, ops_root=ops,
                                diff_loader=lambda p: raw[p["proposal_id"]])
    emit = Emitter(ledger, RUN, KEY, ifinish.utc_now)
    with gitio.ObjectReader(big_repo) as reader:
        checked, rejected = ifinish.record_verified_proposals(ctx, emit, IntegrationPolicy(), reader)
    assert not rejected
    return checked, raw


def test_a_checked_proposal_holds_no_diff_and_reads_back_the_checked_bytes(big_repo: Path, tmp_path: Path) -> None:
    with Ledger.open(None, tmp_path / "ops") as ledger:
        checked, raw = _checked(big_repo, tmp_path / "ops", ledger)
        for pid, cp in checked.items():
            assert cp.held is None and cp.diff_blob == cp.diff_digest  # released: the blob store has it
            assert cp.canonical == raw[pid]
            assert diffs.serialize_diff(cp.parsed) == raw[pid]
            assert list(cp.touched) == cp.parsed.touched_files()


def test_a_stored_diff_changed_after_its_checks_is_not_read_back(big_repo: Path, tmp_path: Path) -> None:
    """The blob file rewritten between the checks and the stacking (another diff, or the
    same one with a line added): reading it back raises, so it never reaches the canvas."""
    with Ledger.open(None, tmp_path / "ops") as ledger:
        checked, raw = _checked(big_repo, tmp_path / "ops", ledger)
        cp = checked["a"]
        path = ledger.blobs.path(cp.diff_blob)
        os.chmod(path, 0o644)
        path.write_bytes(raw["b"])
        with pytest.raises(DomeError) as exc:
            cp.parsed
        assert exc.value.code == "BLOB_DIGEST_MISMATCH"


def test_a_blob_read_that_is_not_the_checked_digest_is_refused(big_repo: Path, tmp_path: Path) -> None:
    """The check does not lean on the store: bytes that are not the checked digest's, or
    a diff that does not parse back to itself, are refused by the proposal itself."""
    with Ledger.open(None, tmp_path / "ops") as ledger:
        checked, raw = _checked(big_repo, tmp_path / "ops", ledger)
    other = checked["a"].released(checked["a"].diff_blob or "", lambda _d: raw["b"])
    with pytest.raises(DiffReloadError, match="does not hash to the checked digest"):
        other.parsed
    loose = raw["a"][:-1]  # without its last newline: it parses, but is not the canonical form
    from registry.canonical import digest_bytes
    import dataclasses
    odd = dataclasses.replace(checked["a"], proposal={**checked["a"].proposal, "diff_digest": digest_bytes(loose)})
    with pytest.raises(DiffReloadError, match="does not parse back to itself"):
        odd.released("x", lambda _d: loose).parsed
    for blob, get in ((None, None), (None, lambda _d: raw["a"]), (checked["a"].diff_blob, None)):
        gone = dataclasses.replace(checked["a"], held=None, diff_blob=blob, blob_get=get)
        with pytest.raises(DiffReloadError, match="neither held nor stored"):
            gone.canonical
