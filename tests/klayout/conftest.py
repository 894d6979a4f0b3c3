from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from worker_sdk.klayout_tools import api
from worker_sdk.klayout_tools.sessions import SessionStore

from .layouts import write_fixtures


class Tools:
    """Calls the api functions on a private store, with the env the test set."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    def __getattr__(self, name: str):
        fn = api.TOOLS[name]
        return lambda request: fn(request, store=self.store)

    def open(self, path: Path, **extra: Any) -> dict[str, Any]:
        return self.open_layout({"path": str(path), **extra})


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("klayout_fixtures")
    write_fixtures(d)
    return d


@pytest.fixture
def kl_env(tmp_path: Path, fixture_dir: Path, monkeypatch) -> dict[str, Path]:
    art = tmp_path / "artifacts"
    monkeypatch.setenv("KLAYOUT_MCP_ARTIFACT_ROOT", str(art))
    monkeypatch.setenv("KLAYOUT_MCP_ALLOWED_ROOTS", f"{fixture_dir}:{tmp_path / 'allowed'}")
    (tmp_path / "allowed").mkdir()
    for var in ("KLAYOUT_MCP_SESSION_TTL_SECONDS", "KLAYOUT_BIN", "KLAYOUT_MCP_QUERY_SCAN_LIMIT",
                "KLAYOUT_MCP_MAX_CROPS", "KLAYOUT_MCP_MAX_SESSIONS", "KLAYOUT_MCP_DRC_TIMEOUT_SECONDS"):
        monkeypatch.delenv(var, raising=False)
    return {"artifacts": art, "fixtures": fixture_dir, "allowed": tmp_path / "allowed",
            "gds": fixture_dir / "chip.gds", "oas": fixture_dir / "chip.oas", "tmp": tmp_path}


@pytest.fixture
def tools(kl_env) -> Tools:
    return Tools(SessionStore())
