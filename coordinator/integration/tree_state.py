"""The head tree of the integration canvas held in memory (`TreeState`): directories
loaded as they are read, changes marked dirty, and each written directory's tree
object kept in git's order (`Listing`) so writing a checkpoint costs what changed."""
from __future__ import annotations

import bisect
import posixpath
from typing import Mapping

from registry.errors import DomeError

from . import gitio


class CanvasError(DomeError):
    code = "CANVAS_ERROR"


class Listing:
    """One directory's tree object kept in git's order between writes, so a directory
    that grows by an entry per proposal is not formatted anew each time: `src` is the
    entries it was made from, `keys` their sort keys in order, `rows` the bytes of each."""

    __slots__ = ("src", "keys", "rows")

    def __init__(self, entries: Mapping[str, tuple[str, str]]) -> None:
        self.src = dict(entries)
        self.rows = dict(gitio.tree_row(m, n, o) for n, (m, o) in entries.items())
        self.keys = sorted(self.rows)

    def update(self, name: str, now: tuple[str, str] | None) -> None:
        """The entry `name` is now `now` (None: gone)."""
        old = self.src.get(name)
        if old == now:
            return
        if old is not None:
            key, _ = gitio.tree_row(old[0], name, old[1])
            del self.keys[bisect.bisect_left(self.keys, key)], self.rows[key], self.src[name]
        if now is not None:
            key, row = gitio.tree_row(now[0], name, now[1])
            bisect.insort(self.keys, key)
            self.rows[key], self.src[name] = row, now

    def tree_bytes(self) -> bytes:
        return b"".join(map(self.rows.__getitem__, self.keys))


class TreeState:
    """The head tree held in memory: lazily loaded directories, dirty tracking."""

    def __init__(self, reader: gitio.ObjectStore, writer: gitio.ObjectStore, root: str) -> None:
        self._reader, self._writer = reader, writer
        self._listings: dict[str, Listing] = {}  # per directory: its last tree object, in order
        self.reset(root)

    def reset(self, root: str) -> None:
        self._dirs: dict[str, dict[str, tuple[str, str]]] = {}
        self._clean: dict[str, str] = {"": root}
        self._dirty: set[str] = set()
        self._touched: dict[str, set[str]] = {}  # per directory: names changed since its last write
        self.root = root

    def _entries(self, d: str) -> dict[str, tuple[str, str]] | None:
        if d in self._dirs:
            return self._dirs[d]
        oid = self._clean.get(d)
        if oid is None:
            if d == "":
                return None
            parent, name = posixpath.split(d)
            pe = self._entries(parent)
            if pe is None or name not in pe or pe[name][0] != "040000":
                return None
            oid = pe[name][1]
        typ, data = self._reader.read(oid)
        entries = {name: (mode, o) for mode, name, o in gitio.parse_tree(data)}
        self._dirs[d] = entries
        self._clean[d] = oid
        return entries

    def get(self, path: str) -> tuple[str, str] | None:
        d, name = posixpath.split(path)
        e = self._entries(d)
        if e is None:
            return None
        got = e.get(name)
        return got if got and got[0] != "040000" else None

    def is_dir(self, path: str) -> bool:
        return self._entries(path) is not None

    def set(self, path: str, mode: str, oid: str) -> None:
        d, name = posixpath.split(path)
        self._ensure_dir(d)
        self._dirs[d][name] = (mode, oid)
        self._touched.setdefault(d, set()).add(name)
        self._mark(d)

    def remove(self, path: str) -> None:
        d, name = posixpath.split(path)
        e = self._entries(d)
        if e is not None and name in e:
            del e[name]
            self._touched.setdefault(d, set()).add(name)
            self._mark(d)

    def _ensure_dir(self, d: str) -> None:
        if self._entries(d) is not None:
            return
        parent, name = posixpath.split(d)
        self._ensure_dir(parent)
        pe = self._dirs[parent]
        if name in pe and pe[name][0] != "040000":
            raise CanvasError(f"{d} is a file on the canvas", code="CANVAS_PATH_IS_FILE")
        self._dirs[d] = {}
        self._clean.pop(d, None)
        self._mark(d)

    def _mark(self, d: str) -> None:
        while True:
            self._dirty.add(d)
            if d == "":
                break
            d = posixpath.dirname(d)

    def _tree_bytes(self, d: str, entries: Mapping[str, tuple[str, str]]) -> bytes:
        """Directory d's tree object: its listing brought up to date by the names changed
        since, and used only when it then holds exactly `entries` (else made afresh)."""
        listing = self._listings.get(d)
        if listing is not None:
            for name in self._touched.pop(d, ()):
                listing.update(name, entries.get(name))
            if listing.src != entries:  # changed some other way (a restored or reset tree)
                listing = None
        if listing is None:
            listing = self._listings[d] = Listing(entries)
        return listing.tree_bytes()

    def write(self) -> str:
        for d in sorted(self._dirty, key=lambda x: (-x.count("/") if x else 1, x)):
            if d == "":
                continue
            entries = self._dirs.get(d, {})
            parent, name = posixpath.split(d)
            pe = self._entries(parent)
            assert pe is not None
            self._touched.setdefault(parent, set()).add(name)
            if entries:
                oid = self._writer.write("tree", self._tree_bytes(d, entries), base=self._clean.get(d))
                pe[name] = ("040000", oid)
                self._clean[d] = oid
            else:
                pe.pop(name, None)
                self._dirs.pop(d, None)
                self._clean.pop(d, None)
                self._listings.pop(d, None)
        self.root = self._writer.write("tree", self._tree_bytes("", self._entries("") or {}),
                                       base=self._clean.get(""))
        self._clean[""] = self.root
        self._dirty.clear()
        return self.root
