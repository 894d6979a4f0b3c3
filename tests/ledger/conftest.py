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
    """The coordinator's key under ops/keys/, where `dome ledger verify` finds it."""
    from coordinator.keys import load_or_create_signing_key
    return load_or_create_signing_key(ops_root)


@pytest.fixture
def keyring(signer: SigningKey) -> Keyring:
    ring = Keyring()
    ring.add(signer.public)
    return ring
