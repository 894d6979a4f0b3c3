"""One check for git object ids: full, lowercase, 40 or 64 hex digits, nothing around them."""
from __future__ import annotations

import pytest

from registry.gitoid import is_git_oid
from registry.pins import PinNotImmutable, parse_pin

SHA1, SHA256 = "a" * 40, "0123456789abcdef" * 4


@pytest.mark.parametrize("value", [SHA1, SHA256])
def test_full_object_ids_are_accepted(value: str) -> None:
    assert is_git_oid(value)
    assert parse_pin(f"litho@{value}").commit == value


@pytest.mark.parametrize("value", [SHA1 + "\n", SHA256 + "\n", " " + SHA1, SHA1.upper(), SHA1[:39], SHA1 + "a",
                                   "HEAD", "main", "", None, 40])
def test_anything_else_is_not_an_object_id(value: object) -> None:
    """A trailing newline used to pass (Python's `$` matches before a final newline)."""
    assert not is_git_oid(value)
    if isinstance(value, str):
        with pytest.raises(PinNotImmutable):
            parse_pin(f"litho@{value}")
