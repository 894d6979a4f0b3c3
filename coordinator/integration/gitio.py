"""Git I/O for the integration area: plumbing calls, a persistent object
reader (`git cat-file --batch`) and an in-process loose-object writer.

Everything the canvas does per proposal goes through these, so stacking a
layer costs no process spawn on the fast path (blobs, trees and commits
are written as loose objects by this process, exactly as git would).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Iterable, Mapping

from registry.errors import DomeError

from . import packdelta

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "dome", "GIT_AUTHOR_EMAIL": "dome@localhost",
                "GIT_COMMITTER_NAME": "dome", "GIT_COMMITTER_EMAIL": "dome@localhost"}


class GitError(DomeError):
    code = "GIT_FAILED"
    retry = "light"


class GitObjectMissing(GitError):
    code = "GIT_OBJECT_MISSING"


class GitObjectCorrupt(GitError):
    """An object git cannot read, or (read with verify) whose bytes do not hash to its id."""
    code = "GIT_OBJECT_CORRUPT"
    retry = "none"


class GitReaderStopped(GitError):
    """The object reader's `git cat-file` stopped (after a corrupt object, say): nothing more is read."""
    code = "GIT_READER_STOPPED"
    retry = "none"


def git(repo: Path | str, *args: str, input: bytes | None = None,
        env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
                **(env or {})}
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True,
                          env=full_env)
    if check and proc.returncode != 0:
        raise GitError(f"git {args[0]} failed: {proc.stderr.decode('utf-8', 'replace').strip()[:500]}",
                       details={"args": list(args)[:8], "rc": proc.returncode})
    return proc


def git_out(repo: Path | str, *args: str, **kw) -> str:
    return git(repo, *args, **kw).stdout.decode("utf-8", "surrogateescape").strip()


def rev_parse(repo: Path | str, rev: str) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "--quiet", rev + "^{commit}", check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def tree_of(repo: Path | str, commit: str) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "--quiet", commit + "^{tree}", check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def common_git_dir(repo: Path | str) -> Path:
    p = Path(git_out(repo, "rev-parse", "--git-common-dir"))
    return p if p.is_absolute() else (Path(repo) / p).resolve()


def object_format(repo: Path | str) -> str:
    proc = git(repo, "rev-parse", "--show-object-format", check=False)
    return proc.stdout.decode().strip() or "sha1"


class ObjectReader:
    """A long-lived `git cat-file --batch` process (thread-safe)."""

    CACHE_BYTES = 64 << 20

    def __init__(self, repo: Path | str, *, verify: bool = False) -> None:
        self.verify = verify
        self._cache: dict[str, tuple[str, bytes]] = {}
        self._cached_bytes = 0
        self._proc = subprocess.Popen(["git", "-C", str(repo), "cat-file", "--batch"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
        self._lock = threading.Lock()
        self._stopped_at: str | None = None  # the object git cat-file stopped at ("" if not ours)

    def read(self, oid: str) -> tuple[str, bytes]:
        """(type, content) of an object; raises GitError when missing.
        Objects are immutable, so recent reads are served from memory."""
        hit = self._cache.get(oid)
        if hit is not None:
            return hit
        typ_s, data = self._read(oid)
        if self._cached_bytes + len(data) > self.CACHE_BYTES:
            self._cache.clear()
            self._cached_bytes = 0
        self._cache[oid] = (typ_s, data)
        self._cached_bytes += len(data)
        return typ_s, data

    def _read(self, oid: str) -> tuple[str, bytes]:
        with self._lock:
            assert self._proc.stdin and self._proc.stdout
            if self._stopped_at is not None:
                raise self._stopped(oid)
            try:
                self._proc.stdin.write(oid.encode() + b"\n")
                self._proc.stdin.flush()
            except OSError:  # git had already stopped: this object is not to blame
                self._stopped_at = ""
                raise self._stopped(oid) from None
            header = self._proc.stdout.readline().rstrip(b"\n")
            if header.endswith(b" missing") or header.endswith(b" ambiguous"):
                raise GitObjectMissing(f"object {oid} not found", details={"oid": oid})
            parts = header.split(b" ")
            size = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else -1
            data = self._proc.stdout.read(size) if size >= 0 else b""
            if size < 0 or len(data) != size or self._proc.stdout.read(1) != b"\n":
                self._stopped_at = oid  # git died reading it (say, a loose object longer than its header says)
                raise GitObjectCorrupt(f"object {oid} unreadable (git cat-file died reading it)",
                                       details={"oid": oid})
            typ = parts[1]
        if self.verify and len(oid) == 40 and ObjectWriter.hash(typ.decode(), data) != oid:
            raise GitObjectCorrupt(f"object {oid} does not hash to its id", details={"oid": oid})
        return typ.decode(), data

    def _stopped(self, oid: str) -> GitError:
        after = f" after {self._stopped_at}" if self._stopped_at else ""
        return GitReaderStopped(f"object {oid} unread: git cat-file stopped{after}",
                                details={"oid": oid, "stopped_at": self._stopped_at})

    def exists(self, oid: str) -> bool:
        try:
            self.read(oid)
            return True
        except GitError:
            return False

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin
            if self._stopped_at is not None:  # out of step with us: what it still writes is nobody's
                self._proc.kill()
            self._proc.stdin.close()
            self._proc.wait(timeout=10)

    def __enter__(self) -> "ObjectReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ObjectWriter:
    """Writes loose objects (sha1 repositories) from this process."""

    def __init__(self, repo: Path | str) -> None:
        self.objects = common_git_dir(repo) / "objects"
        if object_format(repo) != "sha1":
            raise GitError("the in-process writer supports sha1 repositories",
                           code="GIT_OBJECT_FORMAT_UNSUPPORTED")
        self._made: set[str] = set()

    @staticmethod
    def hash(typ: str, data: bytes) -> str:
        return hashlib.sha1(b"%s %d\x00" % (typ.encode(), len(data)) + data).hexdigest()

    def write(self, typ: str, data: bytes) -> str:
        raw = b"%s %d\x00" % (typ.encode(), len(data)) + data
        oid = hashlib.sha1(raw).hexdigest()
        if oid in self._made:
            return oid
        d = self.objects / oid[:2]
        path = d / oid[2:]
        if not path.exists():
            d.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=d, prefix="tmp_obj_")
            with os.fdopen(fd, "wb") as fh:
                fh.write(zlib.compress(raw, 1))
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        self._made.add(oid)
        return oid


def parse_tree(data: bytes) -> list[tuple[str, str, str]]:
    """[(mode, name, oid hex)] of a raw tree object (sha1)."""
    out: list[tuple[str, str, str]] = []
    i = 0
    while i < len(data):
        sp = data.index(b" ", i)
        nul = data.index(b"\x00", sp)
        mode = data[i:sp].decode()
        name = data[sp + 1:nul].decode("utf-8", "surrogateescape")
        oid = data[nul + 1:nul + 21].hex()
        out.append((mode.rjust(6, "0"), name, oid))
        i = nul + 21
    return out


def tree_row(mode: str, name: str, oid: str) -> tuple[bytes, bytes]:
    """One tree entry as (its sort key, its bytes in the tree object)."""
    raw = name.encode("utf-8", "surrogateescape")
    m = "40000" if mode == "040000" else mode
    return (raw + b"/" if mode == "040000" else raw), m.encode() + b" " + raw + b"\x00" + bytes.fromhex(oid)


def format_tree(entries: Iterable[tuple[str, str, str]]) -> bytes:
    """A tree object's bytes from its (mode, name, oid) entries, in git's order."""
    rows = sorted(tree_row(*e) for e in entries)  # names are unique in a tree: only keys are compared
    return b"".join([seg for _key, seg in rows])


def format_commit(tree: str, parents: list[str], message: str, *, when: int,
                  tz: str = "+0000", name: str = "dome", email: str = "dome@localhost") -> bytes:
    lines = [f"tree {tree}"] + [f"parent {p}" for p in parents]
    lines += [f"author {name} <{email}> {when} {tz}", f"committer {name} <{email}> {when} {tz}"]
    return ("\n".join(lines) + "\n\n" + message).encode("utf-8")


def parse_commit(data: bytes) -> dict:
    head, _, message = data.partition(b"\n\n")
    out: dict = {"parents": [], "message": message.decode("utf-8", "replace")}
    for line in head.split(b"\n"):
        k, _, v = line.partition(b" ")
        if k == b"tree":
            out["tree"] = v.decode()
        elif k == b"parent":
            out["parents"].append(v.decode())
    out["trailers"] = parse_trailers(out["message"])
    return out


def parse_trailers(message: str) -> dict[str, str]:
    block = message.rstrip("\n").split("\n\n")[-1]
    out: dict[str, str] = {}
    for line in block.split("\n"):
        k, sep, v = line.partition(": ")
        if sep and k and " " not in k:
            out[k] = v
    return out


def parse_trailers_all(message: str) -> dict[str, list[str]]:
    block = message.rstrip("\n").split("\n\n")[-1]
    out: dict[str, list[str]] = {}
    for line in block.split("\n"):
        k, sep, v = line.partition(": ")
        if sep and k and " " not in k:
            out.setdefault(k, []).append(v)
    return out


def commit_facts(reader: "ObjectReader", oids: "Iterable[str]") -> dict[str, dict]:
    """{sha: {tree, parents, trailers_all}} for the commits that exist; an object that is
    there but cannot be read (or, with a verifying reader, does not hash to its id) raises."""
    out: dict[str, dict] = {}
    for oid in oids:
        if not oid or oid in out:
            continue
        try:
            typ, data = reader.read(oid)
        except GitObjectMissing:
            continue
        if typ != "commit":
            continue
        c = parse_commit(data)
        out[oid] = {"tree": c.get("tree"), "parents": c["parents"],
                    "trailers_all": parse_trailers_all(c["message"])}
    return out


def is_ancestor(repo: "Path | str", anc: str, desc: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", anc, desc, check=False).returncode == 0


def ref_target(repo: "Path | str", ref: str) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "--quiet", ref, check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def worktree_holding(repo: "Path | str", ref: str) -> str | None:
    """The path of a worktree of `repo` that has branch `ref` checked out, or None."""
    path = None
    for line in git_out(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch {ref}":
            return path
    return None


_TYPE_CODE = {"commit": 1, "tree": 2, "blob": 3, "tag": 4}
_OFS_DELTA = 6


def _entry_head(code: int, size: int) -> bytes:
    """A pack entry's header: its type code and the size of its (uncompressed) data."""
    byte = (code << 4) | (size & 0x0F)
    size >>= 4
    head = bytearray()
    while size:
        head.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    head.append(byte)
    return bytes(head)


class ObjectStore:
    """Objects written by this process are held in memory and reach the
    repository as one packfile per `flush()` (`git index-pack --stdin`, which
    re-hashes every object); reads see pending objects first. A persisting
    store also flushes by itself once FLUSH_BYTES are pending: a stack of N
    checkpoints writes N trees of its directories, as large as the directory
    each, so what a whole stack leaves pending grows as N squared. An object
    written with `base=` (the directory's previous tree) goes into the pack as
    a delta against that base when the base is in the same pack and the delta
    is less than half the object: compressing each tree whole cost O(N) per
    proposal (4.6 ms for a 10,000-entry directory)."""

    FLUSH_BYTES = 32 * 2**20
    MAX_DELTA_DEPTH = 50  # as git's pack.depth: reading an object applies at most this many deltas

    def __init__(self, repo: Path | str, reader: ObjectReader, *, persist: bool = True) -> None:
        self.repo = repo
        self.reader = reader
        self.persist = persist
        self._pending: dict[str, tuple[str, bytes]] = {}
        self._bases: dict[str, str] = {}  # pending oid -> the object it is likely a small edit of
        self._pending_bytes = 0
        self._release_at = self.FLUSH_BYTES  # pending bytes at which they are flushed (or forgotten)
        self._flushed: set[str] = set()

    def write(self, typ: str, data: bytes, *, base: str | None = None) -> str:
        """Store an object; `base`: an object this one is likely a small edit of (a
        directory's previous tree), which the pack may store it as a delta against."""
        oid = ObjectWriter.hash(typ, data)
        if oid not in self._flushed and oid not in self._pending:
            self._pending[oid] = (typ, data)
            if base is not None and base != oid:  # (a tree written again unchanged is its own base)
                self._bases[oid] = base
            self._pending_bytes += len(data)
            if self._pending_bytes >= self._release_at:
                if self.persist:
                    self.flush()
                else:
                    self._forget_stored()
        return oid

    def _forget_stored(self) -> None:
        """A store that writes nothing (verify's replay) still need not hold every object it
        made: one the repository already holds, byte for byte, is read back from there (by a
        verifying reader, re-hashed). What the repository lacks stays held; the next pass
        waits for FLUSH_BYTES more, so a replay of objects git lacks does not re-read them
        on every write."""
        for oid in list(self._pending):
            typ, data = self._pending[oid]
            try:
                same = self.reader.read(oid) == (typ, data)
            except GitError:
                same = False
            if same:
                del self._pending[oid]
                self._bases.pop(oid, None)
                self._pending_bytes -= len(data)
        self._release_at = self._pending_bytes + self.FLUSH_BYTES

    def read(self, oid: str) -> tuple[str, bytes]:
        got = self._pending.get(oid)
        return got if got is not None else self.reader.read(oid)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> None:
        if not self._pending:
            return
        if not self.persist:
            return
        body = bytearray(b"PACK" + (2).to_bytes(4, "big") + len(self._pending).to_bytes(4, "big"))
        at: dict[str, int] = {}  # oid -> its entry's offset in this pack
        depth: dict[str, int] = {}  # oid -> deltas a reader applies to get it (0: stored whole)
        for oid, (typ, data) in self._pending.items():
            at[oid] = len(body)
            base = self._bases.get(oid)
            where = at.get(base) if base is not None else None
            if where is not None and self._pending[base][0] == typ and depth[base] < self.MAX_DELTA_DEPTH:
                instructions = packdelta.delta(self._pending[base][1], data)
                if len(instructions) < len(data) // 2:
                    body += _entry_head(_OFS_DELTA, len(instructions))
                    body += packdelta.ofs_distance(at[oid] - where) + zlib.compress(instructions, 1)
                    depth[oid] = depth[base] + 1
                    continue
            body += _entry_head(_TYPE_CODE[typ], len(data)) + zlib.compress(data, 1)
            depth[oid] = 0
        body += hashlib.sha1(body).digest()
        git(self.repo, "index-pack", "--stdin", input=bytes(body))
        self._flushed.update(self._pending)
        self._pending.clear()
        self._bases.clear()
        self._pending_bytes = 0
