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

# suites that need no definition in a work queue: the coordinator runs them with
# defaults when the policy asks for them (litho.resim re-checks every committed mask)
SUITES_WITHOUT_CONFIG = frozenset({"litho.resim"})
