"""The worker gateway: worker-facing tools over MCP, bound to signed grants."""
