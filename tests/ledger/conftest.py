"""Fixtures for ledger tests: a real SQLite ledger file under a temporary ops root."""
from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Ledger
from registry.signing import Keyring, SigningKey


@pytest.fixture
def ledger(ops_root: Path):
    led = Ledger.open(None, ops_root)
    yield led
    led.close()


@pytest.fixture
def signer(ops_root: Path) -> SigningKey:
    """A signing key whose public half is in ops/keys/ (hex), as the CLI reads it."""
    key = SigningKey(bytes(range(32)))
    keys = ops_root / "keys"
    keys.mkdir(exist_ok=True)
    (keys / "coordinator.pub").write_text(key.public.raw.hex() + "\n")
    return key


@pytest.fixture
def keyring(signer: SigningKey) -> Keyring:
    ring = Keyring()
    ring.add(signer.public)
    return ring
