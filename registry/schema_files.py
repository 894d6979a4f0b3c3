"""dome's JSON Schema files: where they are, how one is named and loaded, and the
ECMA-262 meaning of their `pattern`s. No validator here: this module imports no
jsonschema, so the worker can read a schema cheaply (`schema_lite`), and
`schema_store` builds its validators on it.
"""
from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import SchemaValidationError

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
ID_PREFIX = "https://dome.dev/schemas/"


def schema_names() -> list[str]:
    return sorted(
        str(p.relative_to(SCHEMA_DIR).with_suffix("")) for p in SCHEMA_DIR.rglob("*.json")
    )


_NAME = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*(/[a-z0-9_]+(\.[a-z0-9_]+)*)*$")


def load_schema(name: str) -> dict[str, Any]:
    """The schema document `name` (a fresh copy: callers may mutate it)."""
    return copy.deepcopy(_load(name))


@lru_cache(maxsize=None)
def _load(name: str) -> dict[str, Any]:
    path = SCHEMA_DIR / f"{name}.json"
    if not isinstance(name, str) or not _NAME.match(name) or not path.is_file():
        raise SchemaValidationError(f"no schema named {name!r}", code="SCHEMA_NOT_FOUND",
                                    details={"name": name})
    return json.loads(path.read_text())


def ecma_regex(pattern: str) -> re.Pattern[str]:
    r"""Compile a JSON Schema (ECMA-262) pattern with ECMA meaning in Python.

    Two differences matter: Python's `$` also matches before a final newline
    ("run-1\n" would pass `^[a-z0-9-]+$`), ECMA's only at the very end; and
    Python's \d, \w, \s match non-ASCII characters. So `$` outside a
    character class becomes `\Z`, and the pattern is compiled ASCII-only."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
        elif ch == "$":
            ch = "\\Z"
        out.append(ch)
        i += 1
    return re.compile("".join(out), re.ASCII)
