"""Validation of caller-supplied paths before anything opens or executes them.

A path must be absolute, free of NUL and control characters, and its fully
resolved form (every symlink followed) must lie under one of the allowed
roots (also resolved). Outside the roots the answer never depends on
whether the file exists, and error details name only the roots the user
configured (never dome's install folder). Only the resolved path is ever handed to KLayout or a
subprocess, so a symlink cannot point a check at one file and a use at another.
"""
from __future__ import annotations

import os
from pathlib import Path

from registry.pathpolicy import PathOutsideRoots, root_of

from .config import BUILTIN_DECKS
from .errors import FileNotFound, InvalidTarget


def resolve_allowed(raw: str, roots: tuple[Path, ...], *, field: str) -> Path:
    if not isinstance(raw, str) or not raw:
        raise InvalidTarget(f"{field} must be a non-empty string", details={"field": field})
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise InvalidTarget(f"{field} holds control characters", details={"field": field, "reason": "control_characters"})
    if not os.path.isabs(raw):
        raise InvalidTarget(f"{field} must be an absolute path", details={"field": field, "path": raw,
                            "reason": "not_absolute"}, hints=["pass an absolute path"])
    # Containment is judged on the resolved form before anything is said about existence, so a
    # path outside the roots gets the same answer whether or not it exists (no existence oracle).
    real = Path(os.path.realpath(raw))
    if root_of(real, tuple(r for r in map(Path, map(os.path.realpath, roots)) if r.is_dir())) is not None:
        if not real.exists():
            raise FileNotFound(f"{field} does not exist", details={"field": field, "path": raw})
        if not real.is_file():
            raise FileNotFound(f"{field} is not a regular file", details={"field": field, "path": raw})
        return real
    raise PathOutsideRoots(f"{field} is outside the allowed roots",
                        details={"field": field, "path": raw, "reason": "outside_allowed_roots",
                                 "allowed_roots": [str(r) for r in roots if Path(r) != BUILTIN_DECKS]},
                        hints=["set KLAYOUT_MCP_ALLOWED_ROOTS to include the file's directory"])
