"""What a run cost the machine: run.finished, `dome run --json` and the report state the run's
CPU (coordinator, workers, git and other waited-for processes), the sandbox on or off. Under
bubblewrap the workers' CPU shows in no process accounting of the coordinator's; the attempts'
cgroups count it."""
from __future__ import annotations

import pytest

from coordinator.run_cost import run_cost
from coordinator.runloop.finish import integration_finish
from tests.runloop.conftest import cmd_task, run_queue, write_queue

BURN_S = 0.4
# a task that spends BURN_S of CPU inside its sandbox
BURN = ("python3 -c \"import time\nt = time.process_time()\nwhile time.process_time() - t < %s: pass\" "
        "&& echo burnt > burnt.txt" % BURN_S)


def test_cgroup_figures_take_the_attempt_processes_out_of_the_waited_for_children() -> None:
    cost = run_cost(2.0, 1.5, {"process_s": 0.5, "group_s": 6.0, "groups": 10})
    assert cost == {"coordinator_cpu_s": 2.0, "workers_cpu_s": 6.0, "waited_cpu_s": 1.0, "total_cpu_s": 9.0,
                    "workers_measured_by": "cgroup"}


def test_without_cgroups_the_reaped_attempt_processes_are_the_workers() -> None:
    cost = run_cost(2.0, 7.0, {"process_s": 6.0, "group_s": 0.0, "groups": 0})
    assert (cost["workers_cpu_s"], cost["waited_cpu_s"], cost["total_cpu_s"]) == (6.0, 1.0, 9.0)
    assert cost["workers_measured_by"] == "process"


def test_an_executor_without_a_tally_leaves_the_workers_unmeasured() -> None:
    cost = run_cost(2.0, 1.0, None)
    assert cost["workers_cpu_s"] is None and cost["total_cpu_s"] == 3.0
    assert cost["workers_measured_by"] == "unmeasured"


@pytest.mark.parametrize("sandbox, how", [("bwrap", "cgroup"), ("none", "process")])
def test_a_run_states_the_cpu_its_workers_spent(git_repo, ops_root, ledger_env, tmp_path, sandbox, how) -> None:
    from coordinator.cli.status_cmd import run_reasons

    ledger = ledger_env[0]
    q = write_queue(tmp_path, git_repo, [cmd_task("burn", BURN, max_attempts=1)])
    _loop, out = run_queue(q, ops_root, ledger_env, sandbox=sandbox, finish=integration_finish)
    assert out.status == "promoted"
    finished = [e for e in ledger.events(out.run_id) if e.topic == "run.finished"][-1].payload
    cost = finished["cost"]
    assert out.to_json()["cost"] == cost  # what `dome run --json` prints
    assert cost["workers_measured_by"] == how
    assert BURN_S <= cost["workers_cpu_s"] < 30
    assert cost["total_cpu_s"] >= cost["coordinator_cpu_s"] + cost["workers_cpu_s"]
    lines = run_reasons(ledger, out.run_id)["verdict"]  # the words `dome run` ends with
    assert any(line.startswith("  cost: ") and "workers" in line for line in lines)
