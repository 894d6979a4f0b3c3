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


def test_new_blobs_fill_sixteen_fanout_directories_made_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    digests = [store.put(f"blob {i}".encode()) for i in range(300)]
    dirs = sorted(p.name for p in (tmp_path / "blobs" / "sha256").iterdir())
    # one directory per first hex digit: at most 16 ever, however many blobs
    assert len(dirs) == 16 and all(len(d) == 1 for d in dirs)
    for d in digests:
        assert store.path(d) == tmp_path / "blobs" / "sha256" / d[7] / d[7:]
        assert store.path(d).stat().st_mode & 0o777 == 0o444
    assert not list((tmp_path / "blobs").rglob(".tmp-*"))


def _put_in_earlier_layout(root: Path, data: bytes) -> str:
    """A blob as a store written before the 16-directory layout kept it: sha256/<hex[:2]>/<hex>."""
    d = digest_bytes(data)
    p = root / "sha256" / d[7:9] / d[7:]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return d


def test_blobs_of_the_earlier_layout_are_read_where_they_are_and_never_copied(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    d = _put_in_earlier_layout(root, b"a diff from before")
    store = BlobStore(root)
    assert store.get(d) == b"a diff from before"
    assert store.path(d) == root / "sha256" / d[7:9] / d[7:]
    before = sorted(p for p in root.rglob("*"))
    assert store.put(b"a diff from before") == d  # stored already: nothing new is written
    assert sorted(p for p in root.rglob("*")) == before
    # a new blob goes to the new layout, beside the old one
    n = store.put(b"a new diff")
    assert store.path(n) == root / "sha256" / n[7] / n[7:] and store.get(n) == b"a new diff"
    # an old blob whose bytes changed is refused on read, as a new one is
    old = root / "sha256" / d[7:9] / d[7:]
    old.write_bytes(b"a diff from befor3")
    with pytest.raises(BlobCorrupt):
        store.get(d)
