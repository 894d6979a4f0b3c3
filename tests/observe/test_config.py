"""The configuration table: flags over environment over defaults, bad values and unknown
variables refused with a typed error, the table in docs/operations.md kept equal to the code;
OTEL_* read the standard way."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.observe.config import ConfigInvalid, ConfigUnknown, resolve, table_markdown
from coordinator.observe.tracing import TelemetryConfigInvalid, tracing_wanted

ALL = ("call_timeout_s", "max_parallel", "artifact_root", "mcp_bind", "serve_bind", "consent_mode", "log_format")


def test_flag_beats_environment_beats_default() -> None:
    env = {"DOME_MCP_CALL_TIMEOUT_S": "30", "DOME_MAX_PARALLEL": "3", "DOME_SERVE_BIND": "0.0.0.0:9000"}
    got = resolve({"call_timeout_s": 5, "max_parallel": None}, env, ALL)
    assert got["call_timeout_s"] == 5.0 and got["max_parallel"] == 3 and got["serve_bind"] == ("0.0.0.0", 9000)
    assert got["consent_mode"] == "strict" and got["log_format"] == "text" and got["mcp_bind"] is None
    assert resolve({}, {}, ("call_timeout_s",))["call_timeout_s"] == 600.0


@pytest.mark.parametrize("env", [{"DOME_MCP_CALL_TIMEOUT_S": "0"}, {"DOME_MCP_CALL_TIMEOUT_S": "nan"},
                                 {"DOME_MCP_CALL_TIMEOUT_S": "inf"}, {"DOME_MAX_PARALLEL": "2.5"},
                                 {"DOME_MAX_PARALLEL": "-1"}, {"DOME_SERVE_BIND": ":80"},
                                 {"DOME_SERVE_BIND": "127.0.0.1:70000"}, {"CONSENT_MODE": "STRICT"},
                                 {"DOME_LOG_FORMAT": "yaml"}])
def test_bad_values_are_refused_naming_the_setting(env) -> None:
    with pytest.raises(ConfigInvalid) as exc:
        resolve({}, env, ALL)
    (var,) = env
    assert exc.value.details["source"] == var and exc.value.code == "CONFIG_INVALID"


def test_an_unknown_variable_in_an_owned_namespace_is_refused() -> None:
    with pytest.raises(ConfigUnknown) as exc:
        resolve({}, {"DOME_MCP_CALL_TIMEOUT": "5", "DOME_MCP_TOKEN": "x", "DOME_OPS_ROOT": "ops"}, ALL)
    assert exc.value.details["variables"] == ["DOME_MCP_CALL_TIMEOUT"]
    resolve({}, {"DOME_MCP_TOKEN": "x", "DOME_SERVE_TOKEN": "y", "DOME_SOMETHING_ELSE": "z"}, ALL)


def test_docs_hold_the_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert table_markdown() in doc


@pytest.mark.parametrize("env,want", [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "otlp"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, None),
    ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
])
def test_otel_environment(env, want) -> None:
    assert tracing_wanted(env) == want


@pytest.mark.parametrize("env", [{"OTEL_TRACES_EXPORTER": "jaeger"},
                                 {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}])
def test_otel_values_dome_cannot_honour_are_refused(env) -> None:
    with pytest.raises(TelemetryConfigInvalid):
        tracing_wanted(env)


def test_every_variable_dome_reads_in_an_owned_namespace_is_known() -> None:
    """A variable that some part of dome reads must never be refused as a typo: every
    DOME_MCP_/DOME_SERVE_/DOME_LOG_/DOME_MAX_ name in the product's source is a setting or listed."""
    import re

    from coordinator.observe.config import OTHER_OWNED_ENV, OWNED_PREFIXES, SETTINGS
    from tests.conftest import REPO_ROOT

    pattern = re.compile(r"\b(?:%s)[A-Z0-9_]+\b" % "|".join(OWNED_PREFIXES))
    read = {m for pkg in ("coordinator", "worker_sdk", "registry", "ledger")
            for path in (REPO_ROOT / pkg).rglob("*.py") for m in pattern.findall(path.read_text())}
    known = {s.env for s in SETTINGS} | OTHER_OWNED_ENV
    assert read - known == set(), sorted(read - known)
