"""The integration's memory on a kept run: its proposals checked, planned and stacked again.

    python benchmarks/integration_memory.py KEPT_RUN_DIR RUN_ID [--trace]

KEPT_RUN_DIR is a folder `benchmarks/fullchip_block.py --keep` left (`repo/`,
`ops/`). It is copied to a temporary folder, never changed; there the finish
stage's own steps (every proposal checked on its own, the derived bases
rebuilt, the plan, the stacking on the canvas) run again under a new run id,
with the validation suites stubbed as passed, and the process's peak RSS
(VmHWM) is printed after each step with the tree of the stacked head. With
--trace, tracemalloc's figures too (several times slower).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # before benchmarks/, whose registry.py would shadow the package


def vm_hwm_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) // 1024
    return -1


def replay(ops: Path, repo: Path, run_id: str, trace: bool) -> None:
    from coordinator.integration import finish as F
    from coordinator.integration import gitio
    from coordinator.integration.planning import Candidate, plan_stack
    from coordinator.integration.policy import IntegrationPolicy
    from coordinator.integration.recorder import Emitter
    from coordinator.integration.validation import suite_name
    from coordinator.keys import load_or_create_signing_key
    from ledger import Ledger
    from ledger.paging import iter_events

    ledger = Ledger.open(None, ops, migrate_schema=False, must_exist=True)
    proposals = [e.payload for e in iter_events(ledger, run_id, topics={"patch.submitted"})]
    derived = list(F._base_derived_records(ledger, run_id))
    base = [e.payload for e in iter_events(ledger, run_id, topics={"integration.requirements"})][-1]["base_ref"]
    new = f"{run_id}-memory{int(time.time())}"
    key = load_or_create_signing_key(ops)
    ctx = F.FinishContext(run_id=new, repo=repo, base_ref=base, proposals=proposals, ledger=ledger,
                          signing_key=key, ops_root=ops, validations=(),
                          validator=lambda cp, s: {"result": "passed", "suite": suite_name(s)})
    policy = IntegrationPolicy.load()
    print(f"{len(proposals)} proposals, {len(derived)} derived bases; VmHWM at start {vm_hwm_mib()} MiB", flush=True)
    if trace:
        tracemalloc.start()
    emit = Emitter(ledger, new, key, F.utc_now)
    t = time.time()
    with gitio.ObjectReader(repo) as reader:
        F.record_inputs(ctx, emit, policy, "refs/heads/memory-replay")
        checked, rejected = F.record_verified_proposals(ctx, emit, policy, reader, derived_records=derived)
        traced = tracemalloc.get_traced_memory() if trace else (0, 0)
        print(f"checked: {len(checked)} accepted, {len(rejected)} rejections, {time.time() - t:.1f} s; "
              f"VmHWM {vm_hwm_mib()} MiB; traced now {traced[0] / 2**20:.1f} MiB, peak {traced[1] / 2**20:.1f} MiB",
              flush=True)
        if trace:
            tracemalloc.reset_peak()
        cands = [Candidate.from_proposal(c.proposal, c.fingerprints, list(c.touched), policy, frozenset())
                 for c in checked.values()]
        plan, index = plan_stack(cands, base_ref=base, seed=0, policy=policy, rejected=rejected, run_id=new,
                                 created_at=F.utc_now())
        emit(F.T_PLAN, plan.to_dict())
        t = time.time()
        why = F._stack_and_validate(ctx, emit, policy, checked, plan, index, reader)
        traced = tracemalloc.get_traced_memory() if trace else (0, 0)
    emit.flush()
    applied = sum(1 for w in why.values() if w.get("state") == "applied")
    head = gitio.git(repo, "rev-parse", f"refs/dome/runs/{new}/head^{{tree}}").stdout.decode().strip()
    print(f"stacked: {applied} applied, {time.time() - t:.1f} s; VmHWM {vm_hwm_mib()} MiB; traced now "
          f"{traced[0] / 2**20:.1f} MiB, peak {traced[1] / 2**20:.1f} MiB; head tree {head}", flush=True)
    ledger.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kept", type=Path, help="a folder with the run's repo/ and ops/")
    ap.add_argument("run_id")
    ap.add_argument("--trace", action="store_true", help="tracemalloc's figures as well (slower)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dome-intmem-") as tmp:
        for part in ("ops", "repo"):
            shutil.copytree(args.kept / part, Path(tmp) / part, symlinks=True)
        replay(Path(tmp) / "ops", Path(tmp) / "repo", args.run_id, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
