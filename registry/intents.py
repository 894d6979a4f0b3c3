"""The names of worker intents and validation suites, and where their handlers live.

One table for both sides: the worker runtime imports a handler from it by
name (`worker_sdk.intents.resolve`), and the coordinator checks a work
queue's intents and suites against it at load, before any worker starts.
Handlers are named as "module:function" strings, so this module imports
nothing of the worker.
"""
from __future__ import annotations

INTENTS: dict[str, str] = {
    "command": "worker_sdk.intents.command:run",
    "agent": "worker_sdk.intents.agent:run",
    "litho.evaluate": "worker_sdk.litho.intents:evaluate",
    "litho.optimize": "worker_sdk.litho.intents:optimize",
    "drc.run": "worker_sdk.klayout_tools.intents:run_drc",
}

# validation suites run on the integration head the same way
SUITES: dict[str, str] = {
    "command": "worker_sdk.intents.command:suite",
    "litho.resim": "worker_sdk.litho.intents:resimulate",
    "litho.topology": "worker_sdk.litho.intents:topology",
    "drc": "worker_sdk.klayout_tools.intents:drc_suite",
}

# What an intent's attempt needs from its grant beyond the lifecycle calls: an attempt that
# changes its checkout proposes a patch (submit_patch), so its task must request a capability
# that grants it. litho.evaluate and litho.optimize always write (metrics, masks); drc.run
# writes when given `write_to`; any task that must output a patch_proposal does.
PATCH_METHOD = "submit_patch"
PATCH_CAPABILITY = "write"  # the capability to name (write:patch grants the same)
ALWAYS_WRITES = frozenset({"litho.evaluate", "litho.optimize"})


def proposes_patch(action_spec: dict, required_outputs: list | tuple) -> bool:
    """Pure: will an attempt of this task propose a patch (call submit_patch)?"""
    intent = action_spec.get("intent")
    params = action_spec.get("params") or {}
    return (intent in ALWAYS_WRITES or (intent == "drc.run" and "write_to" in params)
            or "patch_proposal" in required_outputs)


# suites that need no definition in a work queue: the coordinator runs them with
# defaults when the policy asks for them (litho.resim re-checks every committed mask)
SUITES_WITHOUT_CONFIG = frozenset({"litho.resim"})
