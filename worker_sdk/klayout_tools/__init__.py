"""KLayout observer and DRC tools (specs/klayout-observer-mcp-contract.md).

`worker_sdk.klayout_tools.api.<tool_name>(request)` for each of the 12 tools;
`intents.run_drc` / `intents.drc_suite` for the work queue and validation;
`decks` for the built-in mask-rule decks. Imports registry only.
"""
