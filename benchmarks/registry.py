"""Contracts-layer costs on the hot paths, each beside a same-process baseline.

    python benchmarks/registry.py [--quick]

- canonical_json (dome: stdlib fast path + rfc8785 fallback) vs the rfc8785
  library alone vs json.dumps(sort_keys=True) (not canonical; the floor);
- schema validation (cached Draft 2020-12 validator, every $ref inlined) vs a stock validator
  that resolves $refs through the schema registry on every call;
- DSSE sign/verify vs bare Ed25519 sign/verify of the same bytes (PyNaCl).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nacl.signing  # noqa: E402
import rfc8785  # noqa: E402
from jsonschema import Draft202012Validator  # noqa: E402

from registry import schema_store  # noqa: E402
from registry.canonical import canonical_json  # noqa: E402
from registry.signing import Keyring, SigningKey, dsse_sign, dsse_verify  # noqa: E402

EVENT = {"schema_version": "dome.control_event/v1", "sequence": 12345, "event_id": "ev-000012345",
         "ts": "2026-01-02T03:04:05.123456Z", "topic": "task.progress", "run_id": "run-abc",
         "wave_id": "w1", "node_id": "n17", "node_execution_id": "n17.2", "task_id": "n17",
         "payload": {"fraction": 0.375, "message": "tile 3/8 done", "metrics": {"l2": 1234, "pvb": 55}},
         "payload_digest": "sha256:" + "a" * 64, "prev_digest": "sha256:" + "b" * 64,
         "canonicalization": "rfc8785-jcs", "kid": None, "signature": None}


def rate(fn: Callable[[], Any], seconds: float) -> float:
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            fn()
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def row(label: str, ours: float, base: float, base_label: str) -> None:
    print(f"{label:<44} {ours:>12,.0f}/s   {base_label:<30} {base:>12,.0f}/s   ratio {ours / base:5.2f}")


def main() -> None:
    seconds = 0.3 if "--quick" in sys.argv else 1.5
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from tests.registry.examples import example  # the schema examples double as realistic payloads

    proposal = example("patch_proposal")
    for name, obj in [("event (envelope)", EVENT), ("patch_proposal", proposal)]:
        ours = rate(lambda: canonical_json(obj), seconds)
        lib = rate(lambda: rfc8785.dumps(obj), seconds)
        floor = rate(lambda: json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(), seconds)
        row(f"canonical_json {name}", ours, lib, "rfc8785.dumps")
        row(f"canonical_json {name}", ours, floor, "json.dumps sorted (floor)")

    for name in ("envelope", "patch_proposal", "spawn_spec"):
        obj = EVENT if name == "envelope" else example(name)
        schema_store.validate(name, obj)
        plain = Draft202012Validator(schema_store.load_schema(name), registry=schema_store._registry())
        row(f"schema validate {name}", rate(lambda: schema_store.validate(name, obj), seconds),
            rate(lambda: plain.validate(obj), seconds), "resolving $refs each call")

    key = SigningKey(bytes(range(32)))
    ring = Keyring({key.kid: key.public})
    payload = canonical_json(proposal)
    raw = nacl.signing.SigningKey(key.seed)
    vk = nacl.signing.VerifyKey(key.public.raw)
    env = dsse_sign("application/vnd.dome.patch_proposal+json", payload, key)
    sig = raw.sign(payload).signature
    row("dsse_sign patch_proposal", rate(lambda: dsse_sign(env["payloadType"], payload, key), seconds),
        rate(lambda: raw.sign(payload), seconds), "bare Ed25519 sign")
    row("dsse_verify patch_proposal", rate(lambda: dsse_verify(env, ring), seconds),
        rate(lambda: vk.verify(payload, sig), seconds), "bare Ed25519 verify")


if __name__ == "__main__":
    main()
