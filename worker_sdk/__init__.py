"""What runs inside a worker: runtime, gateway client, proposal builder,
cancellation, and the domain tools (litho on torch, KLayout).

Imports registry only; reaches the coordinator only through the gateway.
"""
