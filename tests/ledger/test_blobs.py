"""Content-addressed blob store: digest names, verified reads."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import BlobCorrupt, BlobNotFound, InvalidEvent
from ledger.blobs import BlobStore
from registry.canonical import digest_bytes


def test_put_get_round_trip_and_dedupe(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    d = store.put(b"diff --git a/x b/x\n")
    assert d == digest_bytes(b"diff --git a/x b/x\n")
    assert store.put(b"diff --git a/x b/x\n") == d
    assert store.get(d) == b"diff --git a/x b/x\n"
    assert store.path(d).parent.parent.name == "sha256"


def test_corrupt_blob_is_refused_on_read(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    d = store.put(b"mask bytes")
    p = store.path(d)
    os.chmod(p, 0o644)
    p.write_bytes(b"mask bytez")
    with pytest.raises(BlobCorrupt) as err:
        store.get(d)
    assert err.value.code == "BLOB_DIGEST_MISMATCH"
    with pytest.raises(BlobNotFound):
        store.get(digest_bytes(b"never stored"))
    with pytest.raises(InvalidEvent):
        store.get("sha256:../../etc/passwd")


def test_ledger_blobs_live_under_ops(ledger, ops_root: Path) -> None:
    d = ledger.blobs.put(b"log line\n")
    assert ledger.blobs.path(d).is_relative_to(ops_root / "blobs")


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=2048))
def test_any_bytes_round_trip(tmp_path_factory, data: bytes) -> None:
    store = BlobStore(tmp_path_factory.mktemp("b"))
    assert store.get(store.put(data)) == data
