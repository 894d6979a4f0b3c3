"""tools/list, closed schemas, normalization, progress and stdout hygiene over every path and mode."""
from __future__ import annotations

import json

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from .conftest import MODES, PATHS, connect

pytestmark = pytest.mark.anyio

PRODUCTION_TOOLS = {
    "run_submit", "run_status", "poll", "cancel", "events", "evidence", "verify", "promote",
    "evaluate", "optimize", "simulate",
    "open_layout", "close_session", "list_cells", "describe_cell", "list_layers", "query_region",
    "measure_geometry", "analyze_waveguide", "set_view", "render_view", "run_drc_script", "extract_markers",
    "health", "telemetry",
}


async def check_every_tool_listed_with_schemas(client, tmp_path):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert PRODUCTION_TOOLS <= set(tools)
    for name, tool in tools.items():
        assert tool.input_schema["type"] == "object", name
        assert tool.input_schema["additionalProperties"] is False, name
        assert "render" in tool.input_schema["properties"], name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.meta["dome/replay"] in ("Convergent", "ProbeRequired", "NeverReplay"), name
    caps = tools["evaluate"].meta["dome/capabilities"]
    assert caps["report_levels"] == ["aggregate", "detailed"]
    assert {v["detailed"] for v in caps["engine_paths"].values()} <= {"single_pass", "rerun_required", "conditional", "unsupported"}
    assert tools["promote"].annotations.destructive_hint is True
    assert "wait" in tools["optimize"].input_schema["properties"]


async def check_unknown_field_rejected_naming_it(client, tmp_path):
    if True:
        res = await client.call_tool("evaluate", {"layout": "/x.glp", "report_levle": "detailed"})
        assert res.is_error
        assert res.structured_content["code"] == "INVALID_REQUEST"
        assert res.structured_content["details"]["unknown_fields"] == ["report_levle"]
        assert "report_levle" in res.content[0].text
        res = await client.call_tool("poll", {})
        assert res.is_error and res.structured_content["details"]["field"] == "job_id"


async def check_normalization_reported_and_porcelain(client, tmp_path):
    if True:
        res = await client.call_tool("testEcho", {"value": [1, 2], "n": "7"})
        assert not res.is_error, res.content[0].text
        sc = res.structured_content
        assert sc["n"] == 7 and sc["schema_version"] and sc["provenance"]["inputs_hash"].startswith("sha256:")
        notes = res.meta["dome/normalized"]
        assert "tool testEcho -> test_echo" in notes and any("coerced '7' -> 7" in n for n in notes)
        text = res.content[0].text
        assert text.splitlines()[0] == "ok test_echo" and "note: n: coerced" in text
        res = await client.call_tool("test_echo", {"value": 1, "render": "json"})
        assert json.loads(res.content[0].text) == res.structured_content


async def check_progress_strictly_increasing_and_job_polled(client, tmp_path):
    seen: list[float] = []

    async def on_progress(progress, total, message):
        seen.append(progress)

    if True:
        res = await client.call_tool("test_slow", {"steps": 8, "step_s": 0.06}, progress_callback=on_progress)
        assert not res.is_error, res.content[0].text
        assert "job_id" not in res.structured_content  # the tool's result is untouched; the job rides in _meta
        job_id = res.meta["dome/job_id"]
        polled = await client.call_tool("poll", {"job_id": job_id})
        assert polled.structured_content["status"] == "succeeded"
        assert polled.structured_content["progress"] == 1.0
        # wait=false: job_id at once, then poll until done
        res = await client.call_tool("test_slow", {"steps": 4, "step_s": 0.05, "wait": False})
        job2 = res.structured_content["job_id"]
        assert res.structured_content["status"] == "running"
        for _ in range(100):
            st = (await client.call_tool("poll", {"job_id": job2})).structured_content
            if st["status"] != "running":
                break
            await anyio.sleep(0.05)
        assert st["status"] == "succeeded" and st["result"]["completed"] is True
    assert len(seen) >= 2
    assert all(b > a for a, b in zip(seen, seen[1:])), seen


async def check_contamination_never_reaches_the_wire(client, tmp_path):
    # stdio: a stray byte on the host's stdout breaks the SDK client's framing (see also test_stdio_raw)
    if True:
        res = await client.call_tool("test_noisy", {"lines": 5})
        assert not res.is_error, res.content[0].text
        res = await client.call_tool("health", {})
        assert res.structured_content["lifecycle_state"] == "ready"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", PATHS)
async def test_protocol_surface(path, mode, tmp_path):
    """One session per path x mode: every check below runs on it."""
    async with connect(path, mode, tmp_path) as client:
        await check_every_tool_listed_with_schemas(client, tmp_path)
        await check_unknown_field_rejected_naming_it(client, tmp_path)
        await check_normalization_reported_and_porcelain(client, tmp_path)
        await check_progress_strictly_increasing_and_job_polled(client, tmp_path)
        await check_contamination_never_reaches_the_wire(client, tmp_path)


async def test_allow_list_filters_tools_list_and_calls(tmp_path):
    from coordinator.mcp.catalog import default_specs
    from coordinator.mcp.dispatch import ToolHost

    host = ToolHost(ops_root=tmp_path, specs=default_specs(include_test=True), allow=["read", "test_echo"])
    async with connect("inproc", "legacy", tmp_path, host=host) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "evaluate" in names and "test_echo" in names
        assert not names & {"run_submit", "promote", "cancel"}
        with pytest.raises(MCPError) as e:  # a tool outside the allow-list does not exist for this caller
            await client.call_tool("promote", {"run_id": "r", "idempotency_key": "promote-k1"})
        assert e.value.error.code == INVALID_PARAMS and e.value.error.data["code"] == "UNKNOWN_TOOL"
