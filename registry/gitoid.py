"""Git object ids as dome accepts them: 40 lowercase hex digits (SHA-1 repositories) or 64
(SHA-256 repositories). Full ids only: an abbreviated or symbolic ref is not an object id."""
from __future__ import annotations

import re
from typing import Any

OID_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def is_git_oid(value: Any) -> bool:
    return isinstance(value, str) and OID_RE.fullmatch(value) is not None
