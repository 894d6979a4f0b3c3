"""What runs inside a worker: runtime, gateway client, proposal builder,
cancellation, and the domain tools (litho on torch, KLayout).

Imports registry only; reaches the coordinator only through the gateway.

The public face (imported on first use; the domain tools stay in their own
packages, `worker_sdk.litho.api` and `worker_sdk.klayout_tools.api`, because
they pull in torch and KLayout):

    from worker_sdk import CancellationToken, GatewayClient, IntentContext, IntentResult
"""
from __future__ import annotations

from registry.faces import lazy_face

_FACE = {
    "CancellationToken": "worker_sdk.cancel", "Cancelled": "worker_sdk.cancel", "NEVER": "worker_sdk.cancel",
    "GatewayClient": "worker_sdk.client",
    "IntentContext": "worker_sdk.intents", "IntentResult": "worker_sdk.intents",
    "build_proposal": "worker_sdk.proposal",
}

__all__ = sorted(_FACE)


__getattr__ = lazy_face(__name__, _FACE)
