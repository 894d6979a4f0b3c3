"""Session lifecycle: ids, lazy TTL expiry deleting artifacts, close_session, layout on disk."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from .helpers import expect_code


def test_session_ids_are_unique_and_well_formed(tools, kl_env) -> None:
    ids = [tools.open(kl_env["gds"])["session_id"] for _ in range(20)]
    assert len(set(ids)) == 20 and all(re.fullmatch(r"ses_[0-9a-f]{12}", i) for i in ids)


def test_ttl_expiry_is_lazy_and_deletes_the_artifact_dir(tools, kl_env, monkeypatch) -> None:
    monkeypatch.setenv("KLAYOUT_MCP_SESSION_TTL_SECONDS", "0.5")
    old = tools.open(kl_env["gds"], top_cell="TOP")
    tools.render_view({"session_id": old["session_id"], "image_size": {"width": 32, "height": 32}})
    old_dir = Path(old["artifact_root"])
    time.sleep(0.3)
    tools.list_layers({"session_id": old["session_id"]})  # activity resets the idle clock
    time.sleep(0.3)
    assert old_dir.is_dir()  # 0.6 s since open but only 0.3 s idle: still alive
    time.sleep(0.4)
    assert old_dir.is_dir()  # nothing happens without an operation (lazy)
    fresh = tools.open(kl_env["gds"])  # the next operation sweeps
    assert not old_dir.exists()
    expect_code("SESSION_EXPIRED", tools.query_region, {"session_id": old["session_id"],
                                                        "box": {"left": 0, "bottom": 0, "right": 1, "top": 1}})
    assert tools.list_layers({"session_id": fresh["session_id"]})["layers"]
    closed = tools.close_session({"session_id": old["session_id"]})
    assert closed == {"session_id": old["session_id"], "closed": False, "artifact_dir_deleted": False}


def test_close_session_deletes_renders_and_drc_runs(tools, kl_env) -> None:
    r = tools.open(kl_env["gds"], top_cell="TOP")
    sid = r["session_id"]
    deck = kl_env["allowed"] / "metal.py"
    deck.write_text("def run(deck):\n    deck.output(deck.input(2, 0).width_check(deck.um(0.2)), 'w')\n")
    run = tools.run_drc_script({"session_id": sid, "script_path": str(deck)})
    tools.extract_markers({"session_id": sid, "run_id": run["run_id"], "include_crops": True})
    art = Path(r["artifact_root"])
    assert any((art / "drc" / run["run_id"] / "crops").iterdir())
    manifest = json.loads((art / "session.json").read_text())
    assert manifest["runs"] == [run["run_id"]]
    assert tools.close_session({"session_id": sid})["artifact_dir_deleted"] is True
    assert not art.exists() and (kl_env["artifacts"] / "sessions").is_dir()
    expect_code("SESSION_NOT_FOUND", tools.list_cells, {"session_id": sid})


def test_sessions_are_independent(tools, kl_env) -> None:
    a = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    b = tools.open(kl_env["oas"], top_cell="TOP")["session_id"]
    tools.set_view({"session_id": a, "layers": [{"layer": 2, "datatype": 0}]})
    assert all(x["visible"] for x in tools.list_layers({"session_id": b})["layers"])
    tools.close_session({"session_id": a})
    assert tools.list_cells({"session_id": b})["cells"]


def test_ttl_counts_from_the_end_of_the_last_call(kl_env, monkeypatch) -> None:
    """A call longer than the TTL does not expire its session: idle time starts when the call returns."""
    from worker_sdk.klayout_tools import inspect_cells
    from worker_sdk.klayout_tools.sessions import SessionStore

    from .conftest import Tools

    now = [1000.0]
    tools = Tools(SessionStore(clock=lambda: now[0]))
    monkeypatch.setenv("KLAYOUT_MCP_SESSION_TTL_SECONDS", "10")
    sid = tools.open(kl_env["gds"])["session_id"]
    real = inspect_cells.list_layers

    def slow_list_layers(session):
        now[0] += 25.0  # the call itself lasts 2.5 TTLs
        return real(session)

    monkeypatch.setattr(inspect_cells, "list_layers", slow_list_layers)
    tools.list_layers({"session_id": sid})
    monkeypatch.setattr(inspect_cells, "list_layers", real)
    now[0] += 1.0  # one second after the long call ended
    assert tools.list_layers({"session_id": sid})["session_id"] == sid
    now[0] += 10.5  # now idle for longer than the TTL
    expect_code("SESSION_EXPIRED", tools.list_layers, {"session_id": sid})


def test_a_session_in_use_is_not_swept_by_another_call(kl_env, monkeypatch) -> None:
    from worker_sdk.klayout_tools.sessions import SessionStore

    from .conftest import Tools

    now = [0.0]
    store = SessionStore(clock=lambda: now[0])
    tools = Tools(store)
    monkeypatch.setenv("KLAYOUT_MCP_SESSION_TTL_SECONDS", "10")
    sid = tools.open(kl_env["gds"])["session_id"]
    with store.in_use(sid):  # a long call holds the session
        now[0] += 30.0
        tools.open(kl_env["gds"])  # another call sweeps meanwhile
        assert sid in store.session_ids()
    now[0] += 1.0
    assert tools.list_cells({"session_id": sid})["session_id"] == sid
