"""Every record of a run a named client submitted carries the client's name in its signed envelope;
a run started any other way keeps its bytes as they were. The name is fixed by the run's first
record: a record naming anyone else, or no one, is caught by `dome ledger verify`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import Ledger
from ledger.export import render, render_generic
from ledger.record import EventDraft, InvalidEvent, check_submitter
from tests.attacks import attack
from tests.conftest import dome_cli


def _run(led: Ledger, run_id: str, signer) -> None:
    led.append(run_id, "run.started", {"seed": 1}, signer=signer)
    led.append(run_id, "task.dispatched", {"attempt": 1}, node_id="n1", task_id="t1")
    with led.transaction() as tx:
        tx.append_batch(run_id, [EventDraft("task.progress", {"p": 0.5}), EventDraft("task.completed", {})])


def test_every_record_of_a_submitted_run_names_the_client(ops_root: Path, signer, keyring) -> None:
    with Ledger.open(None, ops_root) as led:
        led.submitted_by("run-door", "stdio:python3[4242]")
        _run(led, "run-door", signer)
        _run(led, "run-cli", signer)
    with Ledger.open(None, ops_root) as led:  # another process carries on: the first record says who
        led.append("run-door", "promotion.computed", {"outcome": "promoted"}, signer=signer)
        led.append("run-cli", "promotion.computed", {"outcome": "promoted"}, signer=signer)
        door, cli = led.events("run-door"), led.events("run-cli")
        assert len(door) == 5 and {r.submitted_by for r in door} == {"stdio:python3[4242]"}
        assert all(r.envelope()["submitted_by"] == "stdio:python3[4242]" for r in door)
        assert all(r.submitted_by is None and b"submitted_by" not in r.record_bytes for r in cli)
        assert all(render(r) == render_generic(r) for r in door + cli)  # the export file names it too
        assert json.loads(render(door[-1]))["submitted_by"] == "stdio:python3[4242]"
        assert led.verify(keyring).ok
    r = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json", timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True, r.stdout


@attack("mcp-run-attribution")
@pytest.mark.parametrize("forged", ["mallory", None])
def test_a_record_naming_another_client_or_none_is_caught(ops_root: Path, signer, keyring, forged) -> None:
    with Ledger.open(None, ops_root) as led:
        led.submitted_by("run-door", "alice")
        _run(led, "run-door", signer)
    with Ledger.open(None, ops_root) as led:
        led._submitters["run-door"] = forged  # a writer that names someone else (or no one)
        led.append("run-door", "task.completed", {"forged": True})
        report = led.verify(keyring)
    assert [p.code for p in report.problems] == ["SUBMITTER_MISMATCH"], report.to_json()
    assert report.problems[0].sequence == 5
    r = dome_cli("ledger", "verify", "--ops-root", str(ops_root), "--json", timeout=120)
    assert r.returncode != 0 and "SUBMITTER_MISMATCH" in r.stdout


def test_a_name_a_record_cannot_carry_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    for bad in ('a"b', "a\\b", "", "é", "x" * 201, " lead"):
        with pytest.raises(InvalidEvent):
            check_submitter(bad)
    check_submitter("stdio:claude[4242]")
    r = dome_cli("run", "examples/hello.queue.json", "--submitted-by", 'evil","kid":"x', "--ops-root",
                 str(tmp_path / "ops"), "--json", timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "INVALID_EVENT", r.stdout
    assert not (tmp_path / "ops").exists()
