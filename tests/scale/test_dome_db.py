"""DOME_DB: one environment variable points every command at the ledger, so a PostgreSQL
user does not repeat --db; --db still wins; a command that only reads never creates a file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli.main import _Parser, add_common_arguments
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, write_queue

READERS = [("status",), ("status", "RUN"), ("events", "RUN"), ("verify", "RUN"), ("report", "RUN"),
           ("ledger", "verify"), ("ledger", "export")]


def _argv(argv: tuple[str, ...], run_id: str) -> list[str]:
    return [run_id if a == "RUN" else a for a in argv]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path, str]:
    """One real `dome run` whose ledger lives where DOME_DB says, not under --ops-root."""
    from tests.conftest import make_repo
    tmp = tmp_path_factory.mktemp("domedb")
    repo = make_repo(tmp / "repo")
    q = write_queue(tmp, repo, [cmd_task("one", "echo 1 > one.txt")])
    db = tmp / "elsewhere" / "ledger.db"
    db.parent.mkdir()
    ops = tmp / "ops"
    proc = dome_cli("run", str(q), "--ops-root", str(ops), "--sandbox", "none", "--json",
                    env={"DOME_DB": f"sqlite:///{db}"}, timeout=300)
    assert proc.returncode in (0, 4), proc.stderr[-2000:]
    run_id = json.loads(proc.stdout.strip().splitlines()[-1])["run_id"]
    assert db.is_file() and not (ops / "dome.db").exists()
    return db, ops, run_id


@pytest.mark.slow
@pytest.mark.parametrize("argv", READERS, ids=[" ".join(c) for c in READERS])
def test_every_reading_command_follows_dome_db(finished, argv: tuple[str, ...]) -> None:
    db, ops, run_id = finished
    proc = dome_cli(*_argv(argv, run_id), "--ops-root", str(ops), "--json", env={"DOME_DB": f"sqlite:///{db}"},
                    timeout=120)
    assert proc.returncode == 0, (proc.stdout[-800:], proc.stderr[-800:])
    assert not (ops / "dome.db").exists()


@pytest.mark.slow
def test_db_flag_wins_over_dome_db(finished, tmp_path: Path) -> None:
    db, ops, run_id = finished
    missing = tmp_path / "missing.db"
    proc = dome_cli("status", run_id, "--ops-root", str(ops), "--db", f"sqlite:///{db}", "--json",
                    env={"DOME_DB": f"sqlite:///{missing}"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = dome_cli("status", run_id, "--ops-root", str(ops), "--db", f"sqlite:///{missing}", "--json",
                    env={"DOME_DB": f"sqlite:///{db}"}, timeout=120)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "LEDGER_NOT_FOUND"
    assert not missing.exists()


ALL_READERS = READERS + [("promote", "RUN", "--consent", "abc")]


@pytest.mark.parametrize("argv", ALL_READERS, ids=[" ".join(c) for c in ALL_READERS])
def test_dome_db_naming_a_missing_file_creates_nothing(tmp_path: Path, argv: tuple[str, ...]) -> None:
    missing = tmp_path / "no" / "such.db"
    ops = tmp_path / "ops"
    proc = dome_cli(*_argv(argv, "run-x"), "--ops-root", str(ops), "--json",
                    env={"DOME_DB": f"sqlite:///{missing}"}, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-500:], proc.stderr[-500:])
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "LEDGER_NOT_FOUND" and str(missing) in err["message"]
    assert not missing.parent.exists() and not ops.exists()


def _db_actions(parser) -> list:
    """The --db options of a parser and of its sub-command parsers."""
    out = [a for a in parser._actions if "--db" in a.option_strings]
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            out += [a for child in choices.values() for a in _db_actions(child)]
    return out


def _parser(module: str):
    import importlib
    parser = _Parser(prog="dome x")
    importlib.import_module(f"coordinator.cli.{module}").add_arguments(parser)
    return parser


@pytest.mark.parametrize("module", ["run_cmd", "status_cmd", "events_cmd", "verify_cmd", "promote_cmd",
                                    "report_cmd", "ledger_cmd", "mcp_cmd", "gc_cmd", "registry_cmd"])
def test_every_command_parser_takes_dome_db(module: str, monkeypatch) -> None:
    """Every command's --db defaults to DOME_DB (dome mcp hands it to the runs it starts and
    to its reads), and to nothing without it."""
    monkeypatch.setenv("DOME_DB", "postgresql+psycopg://u@h/dome")
    actions = _db_actions(_parser(module))
    assert actions and all(a.default == "postgresql+psycopg://u@h/dome" for a in actions)
    monkeypatch.delenv("DOME_DB")
    assert all(a.default is None for a in _db_actions(_parser(module)))


def test_reading_a_run_state_from_mcp_creates_no_ledger(tmp_path: Path) -> None:
    """The MCP front door's run state lookup only reads: no ledger, no file."""
    from coordinator.mcp.orchestration import _ledger_state
    from ledger import LedgerNotFound
    with pytest.raises(LedgerNotFound):
        _ledger_state(None, tmp_path / "ops", "run-x")
    assert not (tmp_path / "ops").exists()
