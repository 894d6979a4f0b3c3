"""Immutable containers whose update shares structure with the original.

The run state (coordinator.runstate) is a value: the run loop replaces it on
every appended event, and other threads read whichever version they took.
Copying its per-node and per-execution maps on each event would make an event
cost O(nodes); these containers make it O(log32 n) for a map update and O(1)
for an append, while every earlier version stays valid and unchanged.

- `PMap`: a hash array mapped trie (32-way nodes held as small dicts, copied
  along one path on `set`; a fold of many events passes a transient `owned`
  set so the nodes it made itself are updated in place). A read-only
  `Mapping`: equal to any mapping with the same items.
- `PSet`: a set on top of `PMap` (equal to a set or frozenset with the same
  members).
- `PVector`: an append-only sequence. Versions share one list; a version is a
  prefix of it. Appending to the newest version extends the list in place;
  appending to an older one copies its prefix first, so no version ever sees
  another's items.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from typing import Any

_BITS = 5
_MASK = (1 << _BITS) - 1
_MAX_SHIFT = 64  # past the hash's bits, equal-hash keys share one collision list


def _set(node: dict, h: int, shift: int, key: Any, value: Any, owned: set[int] | None) -> tuple[dict, bool]:
    """`node` with key -> value, and whether the key is new. A node is copied before it is
    changed unless `owned` holds its id: nodes made by the same transient (see PMap.set)
    are changed in place, since no other version can see them."""
    if owned is not None and id(node) in owned:
        new = node
    else:
        new = dict(node)
        if owned is not None:
            owned.add(id(new))
    idx = (h >> shift) & _MASK
    entry = new.get(idx)
    if entry is None:
        new[idx] = (key, value)
        return new, True
    kind = type(entry)
    if kind is tuple:
        if entry[0] == key:
            new[idx] = (key, value)
            return new, False
        if shift + _BITS >= _MAX_SHIFT:
            new[idx] = [entry, (key, value)]
            return new, True
        sub, _ = _set({}, hash(entry[0]), shift + _BITS, entry[0], entry[1], owned)
        new[idx], added = _set(sub, h, shift + _BITS, key, value, owned)
        return new, added
    if kind is dict:
        new[idx], added = _set(entry, h, shift + _BITS, key, value, owned)
        return new, added
    pairs = [p for p in entry if p[0] != key]  # collision list (always copied: it is tiny)
    new[idx] = [*pairs, (key, value)]
    return new, len(pairs) == len(entry)


def _walk(node: dict) -> Iterator[tuple[Any, Any]]:
    for entry in node.values():
        kind = type(entry)
        if kind is tuple:
            yield entry
        elif kind is dict:
            yield from _walk(entry)
        else:
            yield from entry


_MISSING = object()


class PMap(Mapping):
    __slots__ = ("_root", "_len")

    def __init__(self, items: Mapping | Iterable[tuple[Any, Any]] = ()) -> None:
        root: dict = {}
        n = 0
        owned: set[int] = set()  # built as a transient: nothing else sees it until it is returned
        for k, v in (items.items() if isinstance(items, Mapping) else items):
            root, added = _set(root, hash(k), 0, k, v, owned)
            n += added
        self._root, self._len = root, n

    @classmethod
    def _of(cls, root: dict, n: int) -> PMap:
        m = cls.__new__(cls)
        m._root, m._len = root, n
        return m

    def set(self, key: Any, value: Any, owned: set[int] | None = None) -> PMap:
        """A map with key -> value; this one is unchanged.

        `owned` (a transient, for a run of updates whose intermediate maps nobody else
        sees, as in a fold): the ids of the nodes this run of updates made, which it may
        then change in place. Start each run with an empty set and drop it at the end."""
        root, added = _set(self._root, hash(key), 0, key, value, owned)
        return PMap._of(root, self._len + added)

    def _find(self, key: Any) -> Any:
        h, shift, node = hash(key), 0, self._root
        while True:
            entry = node.get((h >> shift) & _MASK)
            if entry is None:
                return _MISSING
            kind = type(entry)
            if kind is tuple:
                return entry[1] if entry[0] == key else _MISSING
            if kind is dict:
                node, shift = entry, shift + _BITS
                continue
            for k, v in entry:
                if k == key:
                    return v
            return _MISSING

    def __getitem__(self, key: Any) -> Any:
        v = self._find(key)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._find(key)
        return default if v is _MISSING else v

    def __contains__(self, key: Any) -> bool:
        return self._find(key) is not _MISSING

    def __iter__(self) -> Iterator[Any]:
        return (k for k, _ in _walk(self._root))

    def items(self):  # one walk rather than a lookup per key
        return dict(_walk(self._root)).items()

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"PMap({dict(_walk(self._root))!r})"


class PSet(Set):
    __slots__ = ("_map",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self._map = PMap((x, True) for x in items)

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset:
        return frozenset(it)  # what set operators (|, &, -) return

    def add(self, item: Any, owned: set[int] | None = None) -> PSet:
        """A set with item; this one is unchanged (`owned`: as for PMap.set)."""
        if item in self._map:
            return self
        s = PSet.__new__(PSet)
        s._map = self._map.set(item, True, owned)
        return s

    def __contains__(self, item: Any) -> bool:
        return item in self._map

    def __iter__(self) -> Iterator[Any]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"PSet({set(self._map)!r})"


class _Shared:
    __slots__ = ("items", "lock")

    def __init__(self, items: list) -> None:
        self.items, self.lock = items, threading.Lock()


class PVector(Sequence):
    __slots__ = ("_buf", "_n")

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self._buf = _Shared(list(items))
        self._n = len(self._buf.items)

    def append(self, item: Any) -> PVector:
        """A sequence with item at the end; this one is unchanged."""
        buf = self._buf
        with buf.lock:
            if len(buf.items) == self._n:
                buf.items.append(item)
            else:
                buf = _Shared([*buf.items[:self._n], item])
        v = PVector.__new__(PVector)
        v._buf, v._n = buf, self._n + 1
        return v

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self._buf.items[:self._n][i])
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._buf.items[i]

    def __iter__(self) -> Iterator[Any]:
        items, n = self._buf.items, self._n
        return (items[i] for i in range(n))

    def __len__(self) -> int:
        return self._n

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PVector({list(self)!r})"
