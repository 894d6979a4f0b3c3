"""MCP tools/list and `dome registry openrpc` come from the same registry contracts."""
from __future__ import annotations

import json

from tests.conftest import dome_cli

from coordinator.mcp.catalog import ENVELOPE_FIELDS, default_specs


def test_tools_list_and_openrpc_agree():
    proc = dome_cli("registry", "openrpc")
    assert proc.returncode == 0, proc.stderr
    rpc = {m["name"]: m for m in json.loads(proc.stdout)["methods"]}
    specs = default_specs(include_test=False)
    assert len(specs) == 25
    for name, spec in specs.items():
        m = rpc[spec.method]
        params = {p["name"]: p for p in m["params"]}
        fields = {f for f in spec.input_schema["properties"] if f not in ENVELOPE_FIELDS}
        assert set(params) == fields, name
        assert {p for p, v in params.items() if v["required"]} == set(spec.input_schema.get("required", [])), name
        assert m["x-dome"]["replay"] == spec.replay.value, name
        assert m["x-dome"]["long_running"] == spec.long_running, name
        assert m["x-dome"]["params_additional_properties"] is False
