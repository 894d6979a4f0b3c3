from __future__ import annotations

from typing import Any

import pytest

from registry import schema_store
from registry.pathpolicy import PathPolicyError
from worker_sdk.klayout_tools.errors import KlayoutToolError


def check(tool: str, response: dict[str, Any]) -> dict[str, Any]:
    """Validate a response against the tool's response schema and return it."""
    schema_store.validate(f"klayout/{tool}.response", response)
    return response


def expect_code(code: str, fn, *args, **kwargs) -> KlayoutToolError | PathPolicyError:
    with pytest.raises((KlayoutToolError, PathPolicyError)) as info:
        fn(*args, **kwargs)
    err = info.value
    assert err.code == code, (err.code, err.message, err.details)
    obj = err.to_object()
    schema_store.validate("error_object", obj)
    assert obj["code"] == code
    return err


def find(shapes: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    hits = [s for s in shapes if all(s.get(k) == v for k, v in match.items())]
    assert hits, match
    return hits[0]
