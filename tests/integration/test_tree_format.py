"""Tree objects the canvas writes: git's bytes and order, with or without the entry cache."""
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
def test_cached_rows_give_the_same_bytes_as_a_fresh_format(first, second, data):
    cache: dict = {}
    assert format_tree(rows(first), cache) == reference(rows(first)) == format_tree(rows(first))
    # the next tree shares some entries with the first, changes others (a new oid or mode for the same name)
    shared = {n: v for n, v in first.items() if data.draw(st.booleans())}
    nxt = {**shared, **second}
    assert format_tree(rows(nxt), cache) == reference(rows(nxt))


def test_a_tree_with_a_file_and_a_directory_of_close_names_hashes_as_git_makes_it(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    oid = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    entries = [("100644", "a.b", oid), ("040000", "a", "4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
               ("100644", "a-", oid), ("100755", "a0", oid), ("120000", "z", oid)]
    listing = "".join(f"{m} {'tree' if m == '040000' else 'blob'} {o}\t{n}\n" for m, n, o in entries)
    made = subprocess.run(["git", "-C", str(tmp_path), "mktree", "--missing"], input=listing.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    ours = format_tree(entries, {})
    got = subprocess.run(["git", "-C", str(tmp_path), "hash-object", "-t", "tree", "--stdin", "--literally"],
                         input=ours, capture_output=True, check=True).stdout.decode().strip()
    assert got == made
