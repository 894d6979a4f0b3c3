"""The parsed form of a git diff and the errors of this package."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import DomeError


DIFF_CANONICALIZATION = "git-binary-full-index/v1"
FINGERPRINT_VERSION = "dome-hunk-fp/v1;eol=lf;ws=rstrip-trailing;ctx=preimage"
DIFF_GIT_ARGS = ("diff", "--binary", "--full-index", "--no-color", "--no-ext-diff",
                 "--src-prefix=a/", "--dst-prefix=b/", "--no-renames")
"""The arguments a producer passes to git (after any `-c` options)."""

SUPPORTED_CANONICALIZATIONS = (DIFF_CANONICALIZATION,)

OID_RE = re.compile(rb"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
MODE_RE = re.compile(r"^[0-7]{6}$")
NULL_OID_PREFIX = "0" * 40


class DiffError(DomeError):
    """The diff cannot be parsed or canonicalized."""

    code = "DIFF_MALFORMED"


class UnsupportedCanonicalization(DiffError):
    code = "DIFF_CANONICALIZATION_UNSUPPORTED"


class PatchDoesNotApply(DiffError):
    code = "DIFF_DOES_NOT_APPLY"


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[bytes, ...]
    """Body lines without their trailing LF; each starts with ' ', '-', '+' or '\\'."""

    def preimage(self) -> list[bytes]:
        return [ln[1:] for ln in self.lines if ln[:1] in (b" ", b"-")]

    def postimage(self) -> list[bytes]:
        return [ln[1:] for ln in self.lines if ln[:1] in (b" ", b"+")]

    @property
    def added(self) -> int:
        return sum(1 for ln in self.lines if ln[:1] == b"+")

    @property
    def removed(self) -> int:
        return sum(1 for ln in self.lines if ln[:1] == b"-")


@dataclass(frozen=True)
class BinaryPatch:
    """A ``GIT binary patch`` block: forward and (optional) reverse parts."""

    lines: tuple[bytes, ...]
    """Lines after ``GIT binary patch`` up to the section end, verbatim."""

    def parts(self) -> list[tuple[str, int, list[bytes]]]:
        """[(kind 'literal'|'delta', declared size, base85 lines)] in order."""
        out: list[tuple[str, int, list[bytes]]] = []
        i = 0
        lines = self.lines
        while i < len(lines):
            head = lines[i]
            if not head:
                i += 1
                continue
            kind, _, size = head.partition(b" ")
            if kind not in (b"literal", b"delta") or not size.isdigit():
                raise DiffError("bad binary patch header", details={"line": head[:80].decode("latin-1")})
            i += 1
            data: list[bytes] = []
            while i < len(lines) and lines[i]:
                data.append(lines[i])
                i += 1
            out.append((kind.decode(), int(size), data))
        return out

    @property
    def declared_sizes(self) -> list[int]:
        return [size for _, size, _ in self.parts()]

    @property
    def forward_size(self) -> int:
        parts = self.parts()
        return parts[0][1] if parts else 0


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None
    """None when the file is created (``/dev/null``)."""
    new_path: str | None
    """None when the file is deleted."""
    old_mode: str | None = None
    new_mode: str | None = None
    old_oid: str = ""
    new_oid: str = ""
    similarity: int | None = None
    copy: bool = False
    hunks: tuple[Hunk, ...] = ()
    binary: BinaryPatch | None = None
    binary_no_data: bool = False

    @property
    def path(self) -> str:
        """The path this section is known by on the base (old path, else new)."""
        return self.old_path if self.old_path is not None else self.new_path  # type: ignore[return-value]

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_deleted(self) -> bool:
        return self.new_path is None

    @property
    def is_rename(self) -> bool:
        return (self.old_path is not None and self.new_path is not None
                and self.old_path != self.new_path)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(sorted({p for p in (self.old_path, self.new_path) if p is not None}))

    @property
    def mode_changed(self) -> bool:
        return (self.old_mode is not None and self.new_mode is not None
                and self.old_mode != self.new_mode)

    def sort_key(self) -> tuple[bytes, bytes]:
        enc = lambda p: (p or "").encode("utf-8", "surrogateescape")  # noqa: E731
        return (enc(self.path), enc(self.new_path))


@dataclass(frozen=True)
class ParsedDiff:
    files: tuple[FilePatch, ...] = field(default_factory=tuple)

    def touched_files(self) -> list[str]:
        return sorted({p for f in self.files for p in f.paths})
