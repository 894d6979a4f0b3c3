"""What a run cost the machine in CPU: the coordinator, its workers, and the other processes
it waited for (git above all), from the process's resource usage and the executor's tally.

Under bubblewrap the workers' CPU shows in no process accounting of the coordinator's: the
sandbox's inner processes are nobody's waited-for children. The local executor counts them in
the attempts' cgroups (cpuacct on cgroup v1, cpu.stat on v2) and reaps each attempt process
with its own usage, so the two can be told apart: what the cgroups counted is the workers'
(the launcher included from the moment it joined), the rest of the waited-for children's CPU
is git and the like. Where no cgroup counts, the reaped attempt processes (the worker itself
without a sandbox) are the workers' figure. The container executor counts its containers,
their conmon processes and its podman API service, where its containers run under a cgroup
of the coordinator's (cgroup v1 as root). Executors that keep no tally (ray; container
elsewhere) leave the workers unmeasured and say so.
"""
from __future__ import annotations

import resource
from typing import Any, Mapping


def run_cost(self_s: float, children_s: float, tally: Mapping[str, float | int] | None) -> dict[str, Any]:
    """The cost block of run.finished (pure). `self_s` and `children_s`: the coordinator
    process's own user + system CPU and that of the children it waited for; `tally`: the
    executor's (`process_s`, `group_s`, `groups`) or None."""
    if tally is None:
        workers, waited, how = None, children_s, "unmeasured"
    else:
        waited = max(0.0, children_s - float(tally["process_s"]))
        if int(tally["groups"]):
            workers, how = float(tally["group_s"]), "cgroup"
        else:
            workers, how = float(tally["process_s"]), "process"
    total = self_s + waited + (workers or 0.0)
    return {"coordinator_cpu_s": round(self_s, 3), "workers_cpu_s": None if workers is None else round(workers, 3),
            "waited_cpu_s": round(waited, 3), "total_cpu_s": round(total, 3), "workers_measured_by": how}


def process_cpu() -> tuple[float, float]:
    """(this process's own CPU seconds, its waited-for children's), user + system."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def current_cost(executor: Any) -> dict[str, Any]:
    """The cost so far of this process's run with this executor."""
    tally = getattr(executor, "cpu", None)
    return run_cost(*process_cpu(), tally.snapshot() if tally is not None else None)
