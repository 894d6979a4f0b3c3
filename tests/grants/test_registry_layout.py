"""The registry folder (spec §13) loads into one index every consumer reads."""
from __future__ import annotations

from registry.contracts import default_registry

REG = default_registry()
KLAYOUT_TOOLS = ["open_layout", "close_session", "list_cells", "describe_cell", "list_layers", "query_region",
                 "measure_geometry", "analyze_waveguide", "set_view", "render_view", "run_drc_script", "extract_markers"]


def test_every_tool_of_the_issue_has_a_contract() -> None:
    assert REG.load_problems == []
    expected = {
        "repo_read": {"read_file", "list_tree", "grep", "get_base_ref", "get_diff_stats"},
        "patch_proposal": {"get_task", "submit_patch", "submit_metadata", "put_artifact", "report_progress",
                           "complete_task"},
        "repo_integration_admin": {"create_integration_worktree", "apply_patch", "checkpoint", "run_validation",
                                   "rollback", "promote"},
        "litho": {"simulate", "evaluate", "optimize"},
        "klayout_observer": set(KLAYOUT_TOOLS),
        "drc": {"run_drc"},
        "mcp_front": {"run_submit", "run_status", "job_poll", "job_cancel", "run_events", "run_evidence",
                      "run_verify", "run_promote", "host_health", "host_telemetry"},
    }
    assert {t: set(c.methods) for t, c in REG.contracts.items()} == expected


def test_klayout_tools_use_the_klayout_schemas_by_exact_name() -> None:
    for name in KLAYOUT_TOOLS:
        m = REG.method(name)
        assert (m.input, m.output) == (f"klayout/{name}.request", f"klayout/{name}.response")


def test_write_methods_require_idempotency_key_and_node_execution_id() -> None:
    for name in ("submit_patch", "submit_metadata", "put_artifact", "report_progress", "complete_task"):
        m = REG.method(name)
        assert m.is_write and m.idempotency_key_required
        required = REG.schema(m.input)["required"]
        assert "idempotency_key" in required and "node_execution_id" in required
        assert REG.validate_request(name, {"node_execution_id": "n"})  # missing key -> errors


def test_admin_methods_are_exactly_the_integration_contract() -> None:
    # plus the MCP front door's run control (coordinator-side only, never in a worker grant)
    assert REG.admin_methods() == set(REG.contracts["repo_integration_admin"].methods) | {"run_submit", "run_promote"}


def test_method_lookup_by_bare_or_qualified_name() -> None:
    assert REG.method("litho.evaluate").tool_id == "litho"
    assert REG.method("evaluate").replay == "Convergent"
    assert REG.method("promote").replay == "NeverReplay"


def test_only_the_terminal_write_spends_a_single_use_grant() -> None:
    spenders = sorted(n for n, m in REG.methods.items() if m.spends_single_use)
    assert spenders == ["complete_task"]
