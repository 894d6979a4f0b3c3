"""Test-only worker tools: slow, crashing and noisy tools that exercise the MCP host's fault
paths, served only with DOME_MCP_TEST_TOOLS=1. Part of the source tree, not of the wheel."""
