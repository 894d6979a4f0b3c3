"""One valid example instance per schema, built from shared pieces.

Tests copy these and break one thing at a time; they are not fixtures of
any other area (those build their own artifacts through their own code).
"""
from __future__ import annotations

import copy
from typing import Any, Iterator

SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64
D3 = "sha256:" + "c" * 64
KID = "ed25519:" + "0123456789abcdef" * 2
SIG = "A" * 86 + "=="
TS = "2026-01-02T03:04:05.123456Z"
IMAGE = "ghcr.io/dome/worker@" + D1


def header(kind: str, **extra: Any) -> dict[str, Any]:
    h = {
        "artifact_kind": kind, "version": "1.0.0", "object_id": "obj-1", "run_id": "run-1",
        "wave_id": "wave-1", "created_at": TS, "producer": "coordinator",
        "determinism_seed": 7, "inputs_hash": D3,
        "payload_digest": D2, "canonicalization": "rfc8785-jcs", "kid": KID, "signature": SIG,
    }
    h.update(extra)
    return h


ACTION = {"intent": "command", "argv": ["python", "-c", "print(1)"], "env": {"A": "1"}}

TASK = {
    "node_id": "n1", "containers": [], "required_capabilities": ["read", "write:patch"],
    "required_outputs": ["patch_proposal"], "dependencies": [], "action_spec": ACTION,
    "atomicity": "atomic_proposal", "risk": "low",
}

EXAMPLES: dict[str, dict[str, Any]] = {
    "error_object": {"code": "BAD_THING", "message": "bad", "details": {}, "hints": [], "retry": "none"},
    "envelope": {
        "schema_version": "dome.control_event/v1", "sequence": 1, "event_id": "ev-1", "ts": TS, "topic": "run.started",
        "run_id": "run-1", "wave_id": None, "node_id": None, "node_execution_id": None, "task_id": None,
        "payload": {"seed": 7}, "payload_digest": D1, "prev_digest": None,
        "canonicalization": "rfc8785-jcs", "kid": None, "signature": None,
    },
    "control_event": {
        "schema_version": "dome.control_event/v1", "sequence": 2, "event_id": "ev-2", "ts": TS, "topic": "task.dispatched",
        "run_id": "run-1", "wave_id": "wave-1", "node_id": "n1", "node_execution_id": "n1.1",
        "task_id": "n1", "payload": {"executor": "local"}, "payload_digest": D1, "prev_digest": D2,
        "canonicalization": "rfc8785-jcs", "kid": KID, "signature": SIG,
    },
    "tool_profile": {
        **{k: v for k, v in header("dome.tool_profile/v1").items()},
        "profile_id": "tp-1", "contract_id": "patch_proposal@1.0.0", "issued_at": TS,
        "expires_at": "2026-01-02T03:14:05Z", "jti": "0123456789abcdef0123", "audience": "worker_runtime",
        "worker_id": "w-1", "single_use": True, "allowed_methods": ["submit_patch", "report_progress"],
        "constraints": {"write_roots": ["."], "deny_globs": [".git/**"],
                        "network": {"allow_hosts": [], "deny_by_default": True}, "env": {}},
        "budgets": {"max_calls": 100, "max_wall_seconds": 600.0}, "issuer": "coordinator",
    },
    "spawn_spec": {
        "artifact_kind": "dome.spawn_spec/v1", "run_id": "run-1", "wave_id": "wave-1", "node_id": "n1",
        "node_execution_id": "n1.1", "task_spec_ref": "n1@" + D1, "tool_profile_ref": D2,
        "container_ref": "host@" + D3, "action_spec": ACTION, "determinism_seed": 7, "inputs_hash": D1,
        "base_ref": SHA, "attempt": 1, "gateway": {"socket": "/run/dome/gw.sock"}, "timeout_s": 30,
    },
    "task_node": TASK,
    "work_queue": {
        "artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main", "determinism_seed": 7,
        "policy": "default", "promote_to": "refs/heads/main",
        "tasks": [TASK, {**TASK, "node_id": "n2", "dependencies": ["n1"]}],
        "validations": [{"suite": "command", "argv": ["pytest", "-q"], "required": True},
                        {"suite": "drc", "params": {"deck": "rules.drc"}, "required": True},
                        {"suite": "litho.resim", "params": {"tolerance": 0.01}, "required": False}],
        "scheduling": {"max_parallel": 4, "endgame_threshold": 2, "endgame_max_duplicates": 1,
                       "default_timeout_s": 60.0, "default_max_attempts": 2},
        "limits": {"cpu_seconds": 60, "memory_mb": 512},
    },
    "patch_proposal": {
        **header("dome.patch_proposal/v1", node_id="n1", node_execution_id="n1.1", base_ref=SHA,
                 base_tree_hash=TREE),
        "proposal_id": "p-1", "diff_canonicalization": "dome.diff/v1", "diff_digest": D1, "diff_ref": D1,
        "touched_files": ["a.txt"], "intent_tags": ["bugfix"],
        "risk": {"class": "low", "surface_area": 3, "deps_touched": False, "migration": False},
        "hunk_fingerprints": [{"path": "a.txt", "base_ref": SHA, "base_context_digest": D2, "edit_digest": D3,
                               "range_hint": {"start": 1, "end": 3}, "fingerprint_version": "dome.hunk/v1"}],
        "declared_constraints": {"no_new_deps": True}, "atomicity": "atomic_file",
        "worker_run_meta": {"tool_profile_id": "tp-1", "run_id": "run-1", "wave_id": "wave-1",
                            "budgets_used": {"calls": 3}},
    },
    "stack_plan": {
        **header("dome.stack_plan/v1", base_ref=SHA),
        "stack_plan_id": "sp-1", "ordered_proposals": [{"proposal_id": "p-1", "diff_digest": D1}],
        "rejected": [{"proposal_id": "p-2", "reason": "conflict", "detail": "overlaps p-1"}],
        "checkpoint_strategy": "per_layer", "expected_validations": ["command"],
        "selection_scores": [{"proposal_id": "p-1", "score": 0.5, "components": {"risk": -0.1}}],
    },
    "apply_result": {
        **header("dome.apply_result/v1", base_ref=SHA),
        "proposal_id": "p-1", "diff_digest": D1, "applied": True, "stack_plan_id": "sp-1", "position": 0,
        "apply_mode": "atomic_proposal", "conflict_summary": {"files": [], "hunks": []},
        "checkpoint_id": "cp-1", "head_ref": SHA,
    },
    "validation_report": {
        **header("dome.validation_report/v1"),
        "report_id": "vr-1", "suite": "command", "required": True, "head_ref": SHA,
        "included_proposals": ["p-1"], "environment": {"container_digests": [IMAGE], "environment_digest": D1},
        "passed": True, "summary": {"returncode": 0}, "metrics": {}, "evidence": [{"kind": "dome.log/v1", "digest": D2}],
    },
    "promotion_decision": {
        **header("dome.promotion_decision/v1"),
        "decision_id": "pd-1", "outcome": "promoted", "from_head_ref": SHA, "to_ref": "refs/heads/main",
        "policy_version": "default@1", "stack_plan_id": "sp-1",
        "evidence_refs": [{"kind": "dome.stack_plan/v1", "object_id": "sp-1", "digest": D1}], "missing": [],
    },
    "scheduling_decision": {
        **header("dome.scheduling_decision/v1"),
        "decision_id": "sd-1", "policy_version": "default@1", "ledger_sequence": 3, "endgame": False,
        "graph_digest": D2, "policy": {"max_parallel": 4}, "state_basis": {"last_sequence": 3},
        "free_slots": 4, "deferred_count": 0,
        "selected": [{"node_id": "n1", "kind": "first", "attempt": 1,
                      "scores": {"blocking": 1000, "rarity": 500, "confidence": 1000, "risk_penalty": 0,
                                 "total": 2500},
                      "tie_break": {"node_priority_group": 0, "node_id": "n1", "task_spec_digest": D1}}],
        "tie_break_order": ["scores.total desc", "node_priority_group", "node_id", "task_spec_digest"],
    },
    "selection_decision": {
        **header("dome.selection_decision/v1"),
        "decision_id": "sel-1", "stack_plan_id": "sp-1",
        "entries": [{"proposal_id": "p-1", "created_at": TS, "diff_digest": D1, "accepted": True, "score": 1.0}],
        "tie_break_order": ["proposal_id", "created_at", "diff_digest"],
    },
    "conflict_decision": {
        **header("dome.conflict_decision/v1"),
        "decision_id": "cd-1", "proposal_id": "p-2", "policy_precedence": 1, "conflict_fingerprint": D3,
        "action": "reorder", "conflicting_with": ["p-1"],
        "tie_break_order": ["policy_precedence", "proposal_id", "conflict_fingerprint"],
    },
}


def example(name: str) -> dict[str, Any]:
    """A deep copy of the example for schema `name`."""
    return copy.deepcopy(EXAMPLES[name])


# Single-field mutations of an example: an unknown key at every level, each key dropped,
# suffixed and replaced by values of other JSON types (what validator tests sweep over).
MUTANTS: list[Any] = [None, 12345, 1.5, "x", True, [], {}, "sha256:" + "0" * 64]


def _paths(node: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(node, dict):
        yield path
        for k, v in node.items():
            yield from _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, path + (i,))


def mutations(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in list(_paths(data)):
        parent = data
        for step in path:
            parent = parent[step]
        extra = copy.deepcopy(data)
        target = extra
        for step in path:
            target = target[step]
        target["zz_unknown"] = 1
        yield f"{path}+zz_unknown", extra
        for key in list(parent):
            dropped = copy.deepcopy(data)
            target = dropped
            for step in path:
                target = target[step]
            del target[key]
            yield f"{path}-{key}", dropped
            if isinstance(parent[key], str):
                for suffix in ("\n", "\u0661", " "):
                    changed = copy.deepcopy(data)
                    target = changed
                    for step in path:
                        target = target[step]
                    target[key] = target[key] + suffix
                    yield f"{path}.{key}+={suffix!r}", changed
            for value in MUTANTS:
                changed = copy.deepcopy(data)
                target = changed
                for step in path:
                    target = target[step]
                target[key] = copy.deepcopy(value)
                yield f"{path}.{key}={value!r}", changed
