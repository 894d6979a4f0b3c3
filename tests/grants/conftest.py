"""Grants fixtures: a coordinator key, its keyring, a ledger and a registry."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from coordinator.grants import GrantVerifier, SignedGrant, issue_profile
from coordinator.keys import load_keyring, load_or_create_signing_key
from registry.contracts import REGISTRY_ROOT, Registry, load_registry
from registry.signing import Keyring, SigningKey

RUN, WAVE, AUD = "run-1", "wave-1", "dome-gateway"
T0 = 1_800_000_000.0  # a fixed "now" (2027-01-15T08:00:00Z)


def open_ledger(ops_root: Path) -> Any:
    """The real SQLite ledger (ops_root/dome.db, migrated)."""
    from ledger import Ledger
    return Ledger.open(None, ops_root)


def small_budget_registry() -> Registry:
    reg = load_registry(REGISTRY_ROOT)
    reg.policy = copy.deepcopy(reg.policy)
    w = reg.policy["policies"]["default"]["capability_classes"]["write"]["budgets"]
    w["max_calls_by_family"]["progress.write"] = 2
    return reg


@dataclass
class World:
    key: SigningKey
    keyring: Keyring
    ledger: Any
    registry: Registry
    verifier: GrantVerifier

    def issue(self, caps: tuple[str, ...] = ("read", "write"), **kw: Any) -> SignedGrant:
        args: dict[str, Any] = dict(key=self.key, run_id=RUN, wave_id=WAVE, node_id="n1", node_execution_id="n1.1",
                                    required_capabilities=list(caps), ledger=self.ledger, registry=self.registry,
                                    now=T0)
        args.update(kw)
        return issue_profile(**args)

    def events(self, run_id: str = RUN) -> list[Any]:
        return list(self.ledger.events(run_id))


@pytest.fixture
def world(ops_root: Path) -> World:
    key = load_or_create_signing_key(ops_root)
    reg = small_budget_registry()
    ledger = open_ledger(ops_root)
    ring = load_keyring(ops_root)
    return World(key=key, keyring=ring, ledger=ledger, registry=reg,
                 verifier=GrantVerifier(ring, ledger, registry=reg))
