"""coordinator/keys.py: key created once, 0600 in a 0700 dir, keyring from *.pub."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from coordinator.keys import (KeyFileInvalid, KeyPermissionsTooOpen, load_keyring,
                              load_or_create_signing_key)
from registry.signing import SigningKey


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_signing_key_created_once_with_private_modes(ops_root: Path) -> None:
    k1 = load_or_create_signing_key(ops_root)
    k2 = load_or_create_signing_key(ops_root)
    assert k1.kid == k2.kid and k1.seed == k2.seed
    assert _mode(ops_root / "keys") == 0o700
    assert _mode(ops_root / "keys" / "coordinator.ed25519") == 0o600
    assert not list((ops_root / "keys").glob(".*tmp"))


def test_keyring_holds_every_pub_file(ops_root: Path) -> None:
    k = load_or_create_signing_key(ops_root)
    other = SigningKey.generate()
    import base64
    (ops_root / "keys" / "old.pub").write_text(f"{other.kid} {base64.b64encode(other.public.raw).decode()}\n")
    ring = load_keyring(ops_root)
    assert ring.kids() == sorted([k.kid, other.kid])
    assert load_keyring(ops_root / "nowhere").kids() == []


def test_widened_key_file_is_refused(ops_root: Path) -> None:
    load_or_create_signing_key(ops_root)
    os.chmod(ops_root / "keys" / "coordinator.ed25519", 0o644)
    with pytest.raises(KeyPermissionsTooOpen) as info:
        load_or_create_signing_key(ops_root)
    assert info.value.code == "KEY_PERMISSIONS_TOO_OPEN"


def test_pub_file_whose_kid_lies_is_refused(ops_root: Path) -> None:
    load_or_create_signing_key(ops_root)
    a, b = SigningKey.generate(), SigningKey.generate()
    import base64
    (ops_root / "keys" / "evil.pub").write_text(f"{a.kid} {base64.b64encode(b.public.raw).decode()}\n")
    with pytest.raises(KeyFileInvalid):
        load_keyring(ops_root)
