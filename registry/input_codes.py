"""Which contract error code a request that fails its schema gets.

The KLayout observer contract has no generic schema error: a bad request is
one of its own codes. The host (before any worker runs) and the worker (when
called directly) both ask this table, so both answer the same code.
"""
from __future__ import annotations

from typing import Iterable

KLAYOUT_CONTRACT = "dome.klayout_observer"
# request field (first path segment) -> contract code; anything else is INVALID_TARGET
KLAYOUT_FIELD_CODES = {"box": "INVALID_BOX", "crop_size_um": "INVALID_BOX",
                       "layers": "INVALID_LAYER"}


def klayout_input_code(paths: Iterable[str]) -> str:
    """The contract code for schema failures at these JSON pointers ("/box/left", "/layers/0", ...)."""
    codes = {KLAYOUT_FIELD_CODES.get(p.strip("/").split("/")[0], "INVALID_TARGET") for p in paths}
    for code in ("INVALID_BOX", "INVALID_LAYER"):
        if code in codes:
            return code
    return "INVALID_TARGET"


def input_error_code(contract_id: str, paths: Iterable[str]) -> str | None:
    """The contract's own code for a schema failure, or None where the contract uses the generic one."""
    if contract_id == KLAYOUT_CONTRACT:
        return klayout_input_code(paths)
    return None
