"""Tree objects the canvas writes: git's bytes and order, whether made afresh or kept up to date."""
from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.integration.gitio import format_tree

MODES = ("100644", "100755", "120000", "040000", "160000")
NAMES = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1,
                max_size=6).filter(lambda n: n not in (".", ".."))
OIDS = st.text("0123456789abcdef", min_size=40, max_size=40)
TREES = st.dictionaries(NAMES, st.tuples(st.sampled_from(MODES), OIDS), max_size=25)


def reference(entries: list[tuple[str, str, str]]) -> bytes:
    """Git's tree format, written out plainly: entries by name, a directory's name as if it ended in '/'."""
    def key(e: tuple[str, str, str]) -> bytes:
        raw = e[1].encode("utf-8", "surrogateescape")
        return raw + b"/" if e[0] == "040000" else raw
    out = b""
    for mode, name, oid in sorted(entries, key=key):
        out += (mode.lstrip("0") or "0").encode() + b" " + name.encode("utf-8", "surrogateescape") + b"\x00" \
            + bytes.fromhex(oid)
    return out


def rows(tree: dict[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    return [(m, n, o) for n, (m, o) in tree.items()]


@settings(max_examples=200, deadline=None)
@given(TREES, TREES, st.data())
def test_a_listing_kept_up_to_date_gives_the_bytes_of_a_fresh_format(first, second, data):
    from coordinator.integration.tree_state import Listing
    assert format_tree(rows(first)) == reference(rows(first)) == Listing(first).tree_bytes()
    listing = Listing(first)
    # the next tree keeps some entries, drops the others, changes or adds more (a new oid or mode)
    kept = {n: v for n, v in first.items() if data.draw(st.booleans())}
    nxt = {**kept, **second}
    for name in {*first, *nxt}:
        listing.update(name, nxt.get(name))
    assert listing.src == nxt
    assert listing.tree_bytes() == reference(rows(nxt))


def test_a_tree_with_a_file_and_a_directory_of_close_names_hashes_as_git_makes_it(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    oid = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    entries = [("100644", "a.b", oid), ("040000", "a", "4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
               ("100644", "a-", oid), ("100755", "a0", oid), ("120000", "z", oid)]
    listing = "".join(f"{m} {'tree' if m == '040000' else 'blob'} {o}\t{n}\n" for m, n, o in entries)
    made = subprocess.run(["git", "-C", str(tmp_path), "mktree", "--missing"], input=listing.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    ours = format_tree(entries)
    got = subprocess.run(["git", "-C", str(tmp_path), "hash-object", "-t", "tree", "--stdin", "--literally"],
                         input=ours, capture_output=True, check=True).stdout.decode().strip()
    assert got == made


class MemoryObjects:
    """Git objects in a dict (what TreeState reads and writes through)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[str, bytes]] = {}

    def write(self, typ: str, data: bytes, *, base: str | None = None) -> str:
        import hashlib
        assert base is None or base in self.objects  # a delta base is an object written before
        oid = hashlib.sha1(f"{typ} {len(data)}\0".encode() + data).hexdigest()
        self.objects[oid] = (typ, data)
        return oid

    def read(self, oid: str) -> tuple[str, bytes]:
        return self.objects[oid]


def _flatten(store: MemoryObjects, tree: str, prefix: str = "") -> dict[str, tuple[str, str]]:
    from coordinator.integration.gitio import parse_tree
    out: dict[str, tuple[str, str]] = {}
    for mode, name, oid in parse_tree(store.read(tree)[1]):
        if mode == "040000":
            out.update(_flatten(store, oid, f"{prefix}{name}/"))
        else:
            out[prefix + name] = (mode, oid)
    return out


def _reference_root(store: MemoryObjects, files: dict[str, tuple[str, str]]) -> str:
    """The tree of `files` made from nothing, with the plain formatter."""
    dirs: dict[str, dict[str, tuple[str, str]]] = {"": {}}
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            dirs.setdefault("/".join(parts[:i]), {})
    for path, val in files.items():
        d, _, name = path.rpartition("/")
        dirs[d][name] = val
    for d in sorted(dirs, key=lambda x: -x.count("/") if x else 1):
        if d == "":
            continue
        oid = store.write("tree", reference([(m, n, o) for n, (m, o) in dirs[d].items()]))
        parent, _, name = d.rpartition("/")
        dirs[parent][name] = ("040000", oid)
    return store.write("tree", reference([(m, n, o) for n, (m, o) in dirs[""].items()]))


PATHS = st.sampled_from(["a", "b", "out/x1", "out/x2", "out/x3", "out/y/z", "d/e/f", "d/e/g", "d/h", "a-", "a.b"])
OPS = st.lists(st.one_of(
    st.tuples(st.just("set"), PATHS, st.sampled_from(["100644", "100755"]), OIDS),
    st.tuples(st.just("remove"), PATHS),
    st.tuples(st.just("write")),
    st.tuples(st.just("reset"), st.integers(0, 9)),  # back to a tree written earlier (a rollback)
    st.tuples(st.just("restore")),  # the in-memory directories replaced by copies (Canvas._tree_with)
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_tree_state_writes_the_tree_a_fresh_format_makes(ops):
    from coordinator.integration.tree_state import TreeState
    store = MemoryObjects()
    files: dict[str, tuple[str, str]] = {"out/x1": ("100644", "1" * 40), "a": ("100644", "2" * 40)}
    tree = TreeState(store, store, _reference_root(store, files))
    written = [(tree.root, dict(files))]
    for op in ops:
        if op[0] == "set":
            _, path, mode, oid = op
            if any(p.startswith(path + "/") for p in files) or any(path.startswith(p + "/") for p in files):
                continue  # a file where a directory is (or under a file): the canvas refuses it earlier
            tree.set(path, mode, oid)
            files[path] = (mode, oid)
        elif op[0] == "remove":
            tree.remove(op[1])
            files.pop(op[1], None)
        elif op[0] == "write":
            root = tree.write()
            assert root == _reference_root(store, files)
            assert _flatten(store, root) == files
            written.append((root, dict(files)))
        elif op[0] == "reset":
            root, was = written[op[1] % len(written)]
            tree.reset(root)
            files = dict(was)
        else:
            tree._dirs = {k: dict(v) for k, v in tree._dirs.items()}
    assert tree.write() == _reference_root(store, files)
