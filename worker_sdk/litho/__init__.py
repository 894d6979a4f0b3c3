"""Lithography engine: SOCS forward model, metrics, ILT and the violations contract (torch).

Entry points: `worker_sdk.litho.api` (evaluate / optimize / simulate), the
CLI `python -m worker_sdk.litho` (what `dome litho` execs), and the worker
intents in `worker_sdk.litho.intents`.
"""
