"""Checkpoint trees go into the integration pack as deltas against the directory's
previous tree: the delta encoding against git's own reader, and the cost that no
longer grows with the directory."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from hypothesis import given, settings, strategies as st

from coordinator.integration import gitio, packdelta

EDIT = st.tuples(st.integers(0, 10_000), st.integers(0, 40), st.binary(max_size=60))


def _edited(base: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(base)
    for at, cut, new in edits:
        at = at % (len(out) + 1)
        out[at:at + cut] = new
    return bytes(out)


def _apply(base: bytes, instructions: bytes) -> bytes:
    """`target` from `base` and a delta, decoded as git's reader decodes one (patch-delta.c)."""
    pos = 0

    def size() -> int:
        nonlocal pos
        n = shift = 0
        while True:
            byte = instructions[pos]
            pos += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return n
    if size() != len(base):
        raise ValueError("delta: base size differs")
    want = size()
    out = bytearray()
    while pos < len(instructions):
        cmd = instructions[pos]
        pos += 1
        if cmd & 0x80:
            offset = n = 0
            for i in range(4):
                if cmd & (1 << i):
                    offset |= instructions[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if cmd & (0x10 << i):
                    n |= instructions[pos] << (8 * i)
                    pos += 1
            n = n or 0x10000
            if offset + n > len(base):
                raise ValueError("delta: copy past the base's end")
            out += base[offset:offset + n]
        elif cmd:
            out += instructions[pos:pos + cmd]
            pos += cmd
        else:
            raise ValueError("delta: reserved instruction 0")
    if len(out) != want:
        raise ValueError("delta: result size differs")
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=20_000), st.lists(EDIT, max_size=4))
def test_a_delta_rebuilds_the_target(base, edits):
    target = _edited(base, edits)
    instructions = packdelta.delta(base, target)
    assert _apply(base, instructions) == target
    if len(edits) <= 1 and len(base) > 1000:  # one edit: a copy, an insert, a copy
        assert len(instructions) < 200


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=30_000), st.lists(EDIT, max_size=3))
def test_common_prefix_and_suffix_match_a_byte_scan(a, edits):
    b = _edited(a, edits)
    p = packdelta.common_prefix(a, b)
    assert p == len(os.path.commonprefix([a, b]))
    limit = min(len(a), len(b)) - p
    assert packdelta.common_suffix(a, b, limit) == min(len(os.path.commonprefix([a[::-1], b[::-1]])), limit)


def _git_ofs(data: bytes) -> int:
    """The distance as git's reader decodes it (packfile.c)."""
    c = data[0]
    ofs = c & 0x7F
    i = 1
    while c & 0x80:
        ofs += 1
        c = data[i]
        i += 1
        ofs = (ofs << 7) + (c & 0x7F)
    return ofs


@given(st.integers(1, 2**40))
def test_ofs_distance_decodes_as_git_reads_it(n):
    assert _git_ofs(packdelta.ofs_distance(n)) == n


def test_copies_of_every_size_class_rebuild():
    base = bytes(range(256)) * 70_000  # 17.9 MB: copies above one instruction's 16 MiB
    target = base[:5] + b"new" + base[5:]
    assert _apply(base, packdelta.delta(base, target)) == target
    for n in (0x10000, 0xFFFF, 0x10001, 0xFFFFFF, 0x1000000):
        t = base[:n] + b"x"
        assert _apply(base, packdelta.delta(base, t)) == t


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    return repo


def _growing_trees(n: int, width: int) -> list[bytes]:
    """n versions of one directory that gains an entry each time (as `out/` does when
    each proposal adds a file), starting from `width` entries."""
    ids = [hashlib.sha1(b"%d" % i).hexdigest() for i in range(width + n)]
    return [gitio.format_tree(("100644", f"f{i:06d}.txt", ids[i]) for i in range(width + k)) for k in range(n)]


def test_git_reads_back_every_tree_of_a_delta_pack(tmp_path):
    repo = _repo(tmp_path)
    trees = _growing_trees(130, 300)  # more versions than one delta chain may hold
    with gitio.ObjectReader(repo) as reader:
        store = gitio.ObjectStore(repo, reader)
        oids, base = [], None
        for data in trees:
            base = store.write("tree", data, base=base)
            oids.append(base)
        store.flush()
    subprocess.run(["git", "-C", str(repo), "fsck", "--strict", "--no-dangling"], check=True, capture_output=True)
    batch = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"], input="".join(o + "\n" for o in oids).encode(),
                           check=True, capture_output=True).stdout
    pos = 0
    for oid, data in zip(oids, trees):
        header, pos = batch[pos:batch.index(b"\n", pos)], batch.index(b"\n", pos) + 1
        assert header.split() == [oid.encode(), b"tree", str(len(data)).encode()]
        assert batch[pos:pos + len(data)] == data
        pos += len(data) + 1
    packs = list((repo / "objects" / "pack").glob("*.idx"))
    assert len(packs) == 1
    listing = subprocess.run(["git", "-C", str(repo), "verify-pack", "-v", str(packs[0])], check=True,
                             capture_output=True, text=True).stdout
    depths = [int(line.split()[5]) for line in listing.splitlines() if len(line.split()) == 7]
    assert len(depths) == len(trees) - 3  # all but the chains' first objects (0, 51, 102) are deltas
    assert max(depths) == gitio.ObjectStore.MAX_DELTA_DEPTH


def test_a_pack_of_growing_trees_grows_with_the_edits_not_the_trees(tmp_path):
    """What a checkpoint costs to store: before, each tree went in whole (the pack, and
    its compression, grew as N squared); a delta is an edit's size."""
    repo = _repo(tmp_path)
    trees = _growing_trees(200, 2000)
    whole = sum(len(t) for t in trees)
    with gitio.ObjectReader(repo) as reader:
        store = gitio.ObjectStore(repo, reader)
        base = None
        for data in trees:
            base = store.write("tree", data, base=base)
        store.flush()
    pack = next((repo / "objects" / "pack").glob("*.pack")).stat().st_size
    # four chains' first trees whole (about 60 KB each, incompressible ids), 196 deltas of
    # about 60 bytes: far below the 13 MB of the trees themselves
    assert pack < 5 * len(trees[-1]) + 200 * 200, (pack, whole)


def test_objects_without_a_base_in_the_pack_are_stored_whole(tmp_path):
    repo = _repo(tmp_path)
    trees = _growing_trees(3, 50)
    with gitio.ObjectReader(repo) as reader:
        store = gitio.ObjectStore(repo, reader)
        first = store.write("tree", trees[0])
        store.flush()  # the base is now in an earlier pack: the next tree cannot refer to it
        second = store.write("tree", trees[1], base=first)
        blob = store.write("blob", b"x" * 5000, base=second)  # another type: never a delta of a tree
        store.flush()
        assert reader.read(second) == ("tree", trees[1])
        assert reader.read(blob) == ("blob", b"x" * 5000)
    for idx in (repo / "objects" / "pack").glob("*.idx"):
        listing = subprocess.run(["git", "-C", str(repo), "verify-pack", "-v", str(idx)], check=True,
                                 capture_output=True, text=True).stdout
        assert all(len(line.split()) != 7 for line in listing.splitlines())  # no delta entries


def test_a_tree_written_again_unchanged_names_itself_as_base(tmp_path):
    """A directory marked dirty whose tree comes out unchanged, over a base tree the
    repository already holds: the object is its own base, stored whole."""
    repo = _repo(tmp_path)
    trees = _growing_trees(2, 20)
    existing = gitio.ObjectWriter(repo).write("tree", trees[0])  # already in the repository (loose)
    with gitio.ObjectReader(repo) as reader:
        store = gitio.ObjectStore(repo, reader)
        assert store.write("tree", trees[0], base=existing) == existing
        nxt = store.write("tree", trees[1], base=existing)
        store.flush()
        assert reader.read(existing) == ("tree", trees[0])
        assert reader.read(nxt) == ("tree", trees[1])
