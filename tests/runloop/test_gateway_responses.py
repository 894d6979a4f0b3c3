"""What the real gateway answers matches the response schemas the registry publishes for
each method (the contract a worker written against the schemas relies on), not only the
hand-written contract cases."""
from __future__ import annotations

import base64

from registry.contracts import default_registry
from registry.canonical import digest_bytes
from tests.runloop.test_gateway import client, gateway  # noqa: F401  (the fixture)


def _errors(method: str, payload: dict) -> list[dict]:
    return list(default_registry().iter_errors(default_registry().method(method).output, payload))


def test_every_worker_method_answers_within_its_response_schema(gateway):  # noqa: F811
    gw, _, _, attempt, _ = gateway
    c = client(gw, attempt("ne-c1"))
    data = b"tile one"
    put = c.call("put_artifact", {"idempotency_key": "ne-c1:put:1", "node_execution_id": "ne-c1",
                                  "media_type": "application/json", "name": "resume/litho.tile/T_0_0",
                                  "content_b64": base64.b64encode(data).decode("ascii"),
                                  "expected_digest": digest_bytes(data)})
    first = c.call("get_task", {"node_execution_id": "ne-c1"})
    progress = c.report_progress(0.5, "half")
    retry = client(gw, attempt("ne-c2")).call("get_task", {"node_execution_id": "ne-c2"})
    assert retry["resume"]  # the retried attempt's answer carries what the first one left
    done = c.complete_task("succeeded", summary={"ok": True})
    for method, payload in (("put_artifact", put), ("get_task", first), ("get_task", retry),
                            ("report_progress", progress), ("complete_task", done)):
        assert _errors(method, payload) == [], (method, payload)
    assert first["node_execution_id"] == "ne-c1" and retry["node_execution_id"] == "ne-c2"
    assert first["wave_id"] == retry["wave_id"] == "w0001"
