"""The MCP front door: a stable host over disposable workers.

Modules: catalog (tool descriptors from registry contracts), normalization,
validation, faults, jobs, consent, telemetry, render, transport (stdio and
worker pipes), supervisor (worker processes), dispatch (the SDK-independent
core, shared with the worker gateway), orchestration (run tools), server
(SDK Server over stdio / HTTP). Never imports torch or klayout.
"""
