"""Only the coordinator writes provenance: a worker's proposal that sets `resolves` (or
another coordinator-owned field) is refused at the real gateway with a typed error, and
nothing is recorded, unless the attempt is a resolver the ledger recorded spawning and the
claim names exactly that spawn."""
from __future__ import annotations

import hashlib

import pytest

from registry.diffs import parse_diff, serialize_diff, sha_digest
from registry.errors import DomeError
from tests.attacks import attack
from tests.runloop.test_gateway import client, gateway  # noqa: F401 - the fixture
from tests.runloop.test_hostile_workers import _proposal

BODY = b"x\n"
OID = hashlib.sha1(b"blob %d\0" % len(BODY) + BODY).hexdigest()
DIFF = (b"diff --git a/a.txt b/a.txt\nnew file mode 100644\nindex " + b"0" * 40 + b".." + OID.encode()
        + b"\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n")


def _submit(gw, attempt, neid: str, **over):
    c = client(gw, attempt(neid))
    ref = c.put_artifact(DIFF, "text/x-diff")
    digest = sha_digest(serialize_diff(parse_diff(DIFF)))
    return c, c.submit_patch(_proposal(ref, diff_digest=digest, node_execution_id=neid,
                                       meta_node_execution_id=neid, **over))


def _topics(ledger, run_id: str) -> list[str]:
    return [e.topic for e in ledger.events(run_id)]


@attack("forged-provenance")
@pytest.mark.parametrize("claim", [
    {"resolves": {"proposal_id": "pp-mine-rejected", "origin_proposal_id": "pp-mine-rejected",
                  "conflict_decision": "cd-1"}},
    {"binding_mismatches": []},
    {"_requires": ["pp-someone-elses"]},
])
def test_a_worker_writing_provenance_is_refused_and_nothing_is_recorded(gateway, claim) -> None:  # noqa: F811
    gw, _writer, _, attempt, ledger = gateway
    run_id = gw.run_id
    before = _topics(ledger, run_id)
    with pytest.raises(DomeError) as ei:
        _submit(gw, attempt, "ne-forge", **claim)
    assert ei.value.code == "PROPOSAL_PROVENANCE_FORGED", ei.value.to_object()
    assert ei.value.details["fields"] == list(claim), ei.value.details
    new = _topics(ledger, run_id)[len(before):]
    assert "patch.submitted" not in new, new


@attack("forged-provenance")
def test_a_resolver_cannot_claim_another_conflict_than_its_spawn(gateway) -> None:  # noqa: F811
    gw, writer, _, attempt, ledger = gateway
    writer.append("resolver.spawned", {"node_execution_id": "ne-res", "origin": "pp-a", "proposal_id": "pp-a",
                                       "try": 1}, node_execution_id="ne-res")
    with pytest.raises(DomeError) as ei:
        _submit(gw, attempt, "ne-res", resolves={"proposal_id": "pp-other", "origin_proposal_id": "pp-other"})
    assert ei.value.code == "PROPOSAL_PROVENANCE_FORGED"
    assert "patch.submitted" not in _topics(ledger, gw.run_id)


def test_a_resolver_naming_its_own_spawn_is_accepted(gateway) -> None:  # noqa: F811
    gw, writer, _, attempt, ledger = gateway
    writer.append("resolver.spawned", {"node_execution_id": "ne-res2", "origin": "pp-a", "proposal_id": "pp-a",
                                       "try": 1}, node_execution_id="ne-res2")
    _, out = _submit(gw, attempt, "ne-res2", resolves={"proposal_id": "pp-a", "origin_proposal_id": "pp-a"})
    assert out["accepted"] is True


def test_binding_drops_the_workers_word_on_coordinator_fields() -> None:
    from coordinator.integration.binding import bind
    bound = bind({"proposal_id": "p", "resolves": {"proposal_id": "x"}, "binding_mismatches": [], "_requires": ["q"]},
                 {"run_id": "r", "node_id": "n"})
    assert not {"resolves", "binding_mismatches", "_requires"} & set(bound) and bound["node_id"] == "n"
