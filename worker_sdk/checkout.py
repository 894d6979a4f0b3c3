"""A worker's checkout of its base and the diff of what its action changed, without git processes.

From the base snapshot the coordinator wrote into the run's read-only base repository
(`registry.base_snapshot`), the runtime writes the files, the `.git` (HEAD detached at the base,
objects borrowed from the base repository) and the index git would have written, and keeps in
memory what it wrote: each file's content and stat. Every file gets one fixed modification time
before the checkout began, so any later write by the action changes it (whatever the clock's
granularity); the action cannot touch the runtime's memory.

After the action, `quick_diff` finds what changed by comparing the stat of every file with that
record (content where the stat differs) and writes git's diff itself for the common case: files
added or deleted, plain text, plain names. Anything else (an edited file, whose hunks need git's
diff algorithm; binary content; modes; symbolic links; ignore or attribute files; a nested
repository; names git would quote) returns None and the caller asks git, from the index written
here. The bytes are git's `diff --cached --binary --full-index --no-renames` output
(`tests/runloop/test_worker_checkout.py` compares them).
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from registry.base_snapshot import Snapshot

from .gitdir import init_git_dir

ZERO_OID = "0" * 40
BINARY_PROBE = 8000  # git calls content binary when a NUL is among its first 8000 bytes
MAX_QUICK_BYTES = 1 << 20
# names git prints as they are (no quoting, no tab after a name with a space)
PLAIN_PATH = re.compile(r"[A-Za-z0-9._+@,=~/-]+\Z")
GIT_CONTROL = (".gitignore", ".gitattributes", ".gitmodules")
_MODE_BITS = {"100644": 0o100644, "100755": 0o100755, "120000": 0o120000}


@dataclass
class BaseCheckout:
    """What the runtime knows of its checkout from before the action ran."""
    index: tuple[bytes, int]  # the index file's bytes and mtime (the git diff starts from them)
    files: dict[str, tuple[str, bytes, tuple]] | None = None  # path -> (mode, content, stat key)


def safe_path(path: str) -> bool:
    parts = path.split("/")
    return not path.startswith("/") and all(p not in ("", ".", "..") and p.lower() != ".git" for p in parts)


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _key(st: os.stat_result) -> tuple:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def index_bytes(rows: list[tuple[str, int, str, os.stat_result]]) -> bytes:
    """A git index (version 2) of `rows` (path, mode, blob id, stat), sorted by path bytes."""
    m = 0xFFFFFFFF
    out = [b"DIRC", struct.pack(">II", 2, len(rows))]
    for path, mode, oid, st in sorted(rows, key=lambda r: r[0].encode()):
        name = path.encode()
        out.append(struct.pack(">10I", (st.st_ctime_ns // 10**9) & m, st.st_ctime_ns % 10**9,
                               (st.st_mtime_ns // 10**9) & m, st.st_mtime_ns % 10**9, st.st_dev & m,
                               st.st_ino & m, mode, st.st_uid & m, st.st_gid & m, st.st_size & m))
        out.append(bytes.fromhex(oid) + struct.pack(">H", min(len(name), 0xFFF)) + name)
        out.append(b"\0" * (8 - (62 + len(name)) % 8))
    body = b"".join(out)
    return body + hashlib.sha1(body).digest()


def checkout_snapshot(snap: Snapshot, scratch: Path, objects: Path) -> BaseCheckout:
    """Write the snapshot's files, `.git` and index into `scratch` (which must not exist)."""
    init_git_dir(scratch / ".git", bare=False, alternates=objects)
    (scratch / ".git" / "HEAD").write_text(f"{snap.commit}\n")  # detached at the base, as git checkout leaves it
    stamp = (int(time.time()) - 2) * 10**9  # before anything the action can write
    made: set[str] = set()
    files: dict[str, tuple[str, bytes, tuple]] = {}
    rows = []
    root = str(scratch)
    for e in snap.entries:
        parent, _, _ = e.path.rpartition("/")
        if parent and parent not in made:
            os.makedirs(scratch / parent, exist_ok=True)
            made.add(parent)
        target = f"{root}/{e.path}"
        if e.mode == "120000":
            os.symlink(bytes(e.data), target)
            st = os.lstat(target)
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         0o777 if e.mode == "100755" else 0o666)
            try:
                os.write(fd, e.data)
                os.utime(fd, ns=(stamp, stamp))
                st = os.fstat(fd)
            finally:
                os.close(fd)
        files[e.path] = (e.mode, bytes(e.data), _key(st))
        rows.append((e.path, _MODE_BITS[e.mode], e.oid, st))
    index = scratch / ".git" / "index"
    index.write_bytes(index_bytes(rows))
    return BaseCheckout(index=(index.read_bytes(), index.stat().st_mtime_ns), files=files)


class _NeedsGit(Exception):
    """Something quick_diff leaves to git."""


def _walk(root: Path, rel: str, found: dict[str, os.DirEntry]) -> None:
    with os.scandir(root / rel if rel else root) as it:
        for entry in it:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name == ".git":
                if rel:
                    raise _NeedsGit  # a nested repository: git records it as a gitlink
                continue
            if entry.is_dir(follow_symlinks=False):
                _walk(root, path, found)
            else:
                found[path] = entry


def _body(data: bytes, sign: bytes) -> tuple[int, bytes]:
    lines = data.split(b"\n")
    complete = data.endswith(b"\n")
    if complete:
        lines.pop()
    body = b"".join(sign + line + b"\n" for line in lines)
    return len(lines), body if complete else body + b"\\ No newline at end of file\n"


def _span(n: int) -> bytes:
    return b"1" if n == 1 else b"1,%d" % n


def _text(path: str, data: bytes) -> None:
    if not PLAIN_PATH.match(path) or b"\0" in data[:BINARY_PROBE] or len(data) > MAX_QUICK_BYTES:
        raise _NeedsGit


def _added(path: str, mode: str, data: bytes) -> bytes:
    p = path.encode()
    out = b"diff --git a/%s b/%s\nnew file mode %s\nindex %s..%s\n" % (p, p, mode.encode(), ZERO_OID.encode(),
                                                                    blob_id(data).encode())
    if not data:
        return out
    n, body = _body(data, b"+")
    return out + b"--- /dev/null\n+++ b/%s\n@@ -0,0 +%s @@\n" % (p, _span(n)) + body


def _deleted(path: str, mode: str, data: bytes) -> bytes:
    p = path.encode()
    out = b"diff --git a/%s b/%s\ndeleted file mode %s\nindex %s..%s\n" % (p, p, mode.encode(),
                                                                        blob_id(data).encode(), ZERO_OID.encode())
    if not data:
        return out
    n, body = _body(data, b"-")
    return out + b"--- a/%s\n+++ /dev/null\n@@ -%s +0,0 @@\n" % (p, _span(n)) + body


def _read(entry: os.DirEntry) -> bytes:
    with open(entry.path, "rb") as f:
        return f.read()


def quick_diff(scratch: Path, base: BaseCheckout) -> bytes | None:
    """git's diff of the checkout against its base, or None where git must compute it."""
    files = base.files
    if files is None or any(p.rpartition("/")[2] in GIT_CONTROL for p in files):
        return None
    try:
        found: dict[str, os.DirEntry] = {}
        _walk(scratch, "", found)
        pieces: dict[str, bytes] = {}
        for path, entry in found.items():
            st = entry.stat(follow_symlinks=False)
            known = files.get(path)
            if known is not None:
                mode, data, key = known
                if _key(st) == key:
                    continue
                same_kind = entry.is_file(follow_symlinks=False) and mode != "120000"
                if same_kind and bool(st.st_mode & 0o100) == (mode == "100755") and _read(entry) == data:
                    continue  # rewritten with the same content and mode: git sees no change
                return None  # edited: its hunks are git's to compute
            if not entry.is_file(follow_symlinks=False) or path.rpartition("/")[2] in GIT_CONTROL:
                return None
            data = _read(entry)
            _text(path, data)
            pieces[path] = _added(path, "100755" if st.st_mode & 0o100 else "100644", data)
        for path, (mode, data, _key_) in files.items():
            if path in found:
                continue
            if mode == "120000" or any(a.startswith(path + "/") for a in pieces):
                return None  # a link, or a file that became a directory
            _text(path, data)
            pieces[path] = _deleted(path, mode, data)
    except (_NeedsGit, OSError):
        return None
    return b"".join(pieces[p] for p in sorted(pieces, key=str.encode))
