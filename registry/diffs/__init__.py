"""Canonical git diffs, their digests, and stable hunk fingerprints (pure).

One module per concern: `model` (parsed form, errors), `quoting` (git path
quoting), `parse`, `canonical` (canonical bytes, digest), `fingerprints`,
`describe` (what a PatchProposal needs), `subset` (guarded splits),
`apply` (strict text application), `binary` (literals, capped inflation).

Both sides of a patch call this module: the worker's PatchProposal builder
(to fill `diff_canonicalization`, `diff_digest`, `touched_files`,
`hunk_fingerprints`) and the coordinator (to recompute and compare them).
Nothing here touches a repository; everything is bytes in, data out.

Canonicalization ``git-binary-full-index/v1``
---------------------------------------------
Input is the output of ``git diff --binary --full-index`` (bytes; ``str`` is
accepted and encoded as UTF-8 with surrogateescape). The canonical form is
``serialize(parse(input))``, which fixes these choices:

1. Anything before the first ``diff --git`` line (a commit message, a
   ``format-patch`` header) is dropped. Nothing after the last file section is
   kept except the file section itself.
2. Every file section must carry an ``index <old>..<new>`` line with full
   object ids (40 or 64 hex digits); abbreviated ids are rejected because a
   3-way apply needs the exact preimage blob.
3. File sections are emitted in byte order of their path (old path, then new
   path); a path may appear in one section only.
4. Extended header lines are emitted in git's order: mode lines, similarity /
   rename / copy lines, ``index``. Paths are emitted with git's default
   quoting (``core.quotePath=true``: control bytes, ``"``, ``\\`` and bytes
   >= 0x80 as C escapes) and a tab after ``---``/``+++`` names containing a
   space (quoted or not), exactly as git writes them.
5. Hunk headers are ``@@ -a[,b] +c[,d] @@`` with the ",1" count omitted (as
   git does) and the section heading after the second ``@@`` removed: it
   depends on the diff driver of whoever ran git, not on the change.
6. Hunk bodies, ``\\ No newline at end of file`` markers and ``GIT binary
   patch`` blocks are kept byte for byte (including any CR). Hunk counts are
   checked against the body.
7. The result ends with exactly one newline. An empty diff canonicalizes to
   empty bytes.

``diff_digest`` is ``sha256:<hex>`` over the canonical bytes, so two diffs
that differ only in the points above have the same digest.

Hunk fingerprints ``dome-hunk-fp/v1``
-------------------------------------
One fingerprint per text hunk (and one per binary, mode-only, rename-only,
or whole-file section), with ``path``, ``base_ref``, ``base_context_digest``,
``edit_digest``, ``range_hint`` and ``fingerprint_version``. Normalization
(named by the version string): line endings CRLF/CR -> LF, trailing
whitespace (spaces and tabs) stripped, everything else significant.

- ``base_context_digest``: sha256 of the normalized preimage of the hunk
  (context and removed lines, in order).
- ``edit_digest``: sha256 of the normalized removed lines and added lines,
  each prefixed with its marker.
- ``range_hint``: ``{"start", "end"}`` 1-based inclusive preimage lines on
  the base; a pure insertion with no context gets the line it follows; binary,
  mode-only, creation and deletion sections carry no range_hint (the whole
  file) and ``kind: "file"`` instead of ``"hunk"``.
"""
from __future__ import annotations
from __future__ import annotations

from .apply import apply_text
from .binary import binary_literal, binary_literal_size
from .canonical import (canonicalize_diff, check_canonicalization, diff_digest, serialize_diff, serialize_file,
                        sha_digest, touched_files)
from .describe import describe_diff, diff_stats
from .fingerprints import file_fingerprints, hunk_fingerprints
from .model import (DIFF_CANONICALIZATION, DIFF_GIT_ARGS, FINGERPRINT_VERSION, NULL_OID_PREFIX, OID_RE,
                    SUPPORTED_CANONICALIZATIONS, BinaryPatch, DiffError, FilePatch, Hunk, ParsedDiff,
                    PatchDoesNotApply, UnsupportedCanonicalization)
from .parse import parse_diff
from .quoting import quote_path
from .subset import select

__all__ = [
    "DIFF_CANONICALIZATION", "DIFF_GIT_ARGS", "FINGERPRINT_VERSION", "NULL_OID_PREFIX", "OID_RE",
    "SUPPORTED_CANONICALIZATIONS", "BinaryPatch", "DiffError", "FilePatch", "Hunk", "ParsedDiff",
    "PatchDoesNotApply", "UnsupportedCanonicalization", "apply_text", "binary_literal", "binary_literal_size",
    "canonicalize_diff", "check_canonicalization", "describe_diff", "diff_digest", "diff_stats",
    "file_fingerprints", "hunk_fingerprints", "parse_diff", "quote_path", "select", "serialize_diff",
    "serialize_file", "sha_digest", "touched_files",
]
