"""The egress gate: model traffic from sandboxed agents, through the coordinator, to allowed hosts only."""
