"""Mutation testing of the trust-critical modules (cosmic-ray's operators, our runner).

    python -m tests.mutation                       # every module of TARGETS, one after another
    python -m tests.mutation --module gate         # the targets whose path contains "gate"
    python -m tests.mutation --sample 40 --seed 1  # a deterministic sample of 40 mutants (CI)
    python -m tests.mutation --list                # the mutants, nothing run
    python -m tests.mutation --exclude done.jsonl  # without the mutants an earlier --json run judged

Each mutant is one small change (a comparison turned round or moved by one, a
condition negated, `and`/`or` swapped, a loop that runs zero times, an `except`
that no longer catches) made by a cosmic-ray operator in a private copy of the
checkout (hard links; the mutated file is replaced, never written through a link).
The fast test files mapped to its module are run once under coverage.py, which
records which test executed each line; a mutant then runs only the tests that
executed its statement (with `-x`). A test that fails (or a run past the time
limit) kills the mutant; one that passes lets it survive, as does a mutant whose
statement no mapped test executes (it is reported as not covered, without a run). The report gives the kill rate per module and every survivor as
`file:line operator: the mutated line`. Survivors judged equivalent (no test can
tell them from the original) are listed in EQUIVALENT with the reason, and are
left out of the counts; docs/development.md names them.

The exit status is 1 when a mutant that is not in EQUIVALENT survives.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

ROOT = Path(__file__).resolve().parent.parent
DOME_PACKAGES = frozenset({"registry", "ledger", "coordinator", "worker_sdk", "tests"})

# The operators: the mutations a reviewer would call a plausible slip in a check.
OPERATORS = (
    "core/ReplaceComparisonOperator_Eq_NotEq", "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_LtE", "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE", "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Is_IsNot", "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_Sub_Add",
    "core/AddNot", "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd",
    "core/ReplaceTrueWithFalse", "core/ReplaceFalseWithTrue",
    "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak",
    "core/ZeroIterationForLoop",
)


@dataclass(frozen=True)
class Target:
    """A module to mutate, the functions of it that count (all when empty), and the
    fast test files that judge it."""

    path: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()


INTEG = "tests/integration/"
TARGETS: tuple[Target, ...] = (
    Target("coordinator/integration/export_checks.py", (INTEG + "test_proof_checks.py",)),
    Target("coordinator/integration/gate.py", (INTEG + "test_gate_replay.py", INTEG + "test_proof_checks.py")),
    Target("coordinator/integration/tree_rules.py", (INTEG + "test_proof_checks.py",
                                                     INTEG + "test_hostile_proposals.py")),
    Target("coordinator/integration/binding.py", ("tests/grants/test_binding.py",)),
    Target("coordinator/egress/metering.py", ("tests/agents/test_egress_metering.py",)),
    Target("worker_sdk/sandbox_limits.py", ("tests/runloop/test_limits_judgement.py",)),
    Target("registry/sandbox_verdict.py", ("tests/runloop/test_limits_judgement.py",)),
    Target("coordinator/executors/local.py", ("tests/runloop/test_limits_judgement.py",), ("_sweep",)),
    Target("coordinator/integration/verify.py", (INTEG + "test_verify_verdict.py", INTEG + "test_verify_exports.py",
                                                 INTEG + "test_verify_cli.py", INTEG + "test_promotion.py",
                                                 INTEG + "test_validation_inputs.py", INTEG + "test_derived_bases.py",
                                                 INTEG + "test_blob_tamper.py", "tests/runloop/test_partial.py",
                                                 INTEG + "test_verify_corrupt_base.py")),
    Target("coordinator/integration/proposals.py", (INTEG + "test_proposals.py", INTEG + "test_hostile_proposals.py",
                                                    INTEG + "test_policy_presets.py", INTEG + "test_stacking.py",
                                                    INTEG + "test_derived_bases.py", INTEG + "test_validation_inputs.py",
                                                    INTEG + "test_released_diffs.py", "tests/scale/test_bounded_memory.py")),
    Target("coordinator/egress/gate.py", ("tests/agents/test_egress_metering.py", "tests/agents/test_egress_gate.py",
                                          "tests/agents/test_egress_gate_edges.py")),
    Target("coordinator/grants.py", ("tests/grants/test_verify.py", "tests/grants/test_call_mac.py",
                                     "tests/grants/test_issued_warm.py", "tests/grants/test_scope.py",
                                     "tests/grants/test_group_commit.py", "tests/grants/test_issue_path.py",
                                     "tests/grants/test_verify_edges.py", "tests/scale/test_listing_cache.py",
                                     "tests/runloop/test_gateway.py", "tests/runloop/test_gateway_rejections.py",
                                     "tests/runloop/test_gateway_one_commit.py")),
    Target("registry/toolprofile.py", ("tests/grants/test_verify.py", "tests/grants/test_call_mac.py",
                                       "tests/grants/test_issued_bytes.py", "tests/grants/test_issued_warm.py",
                                       "tests/grants/test_verify_edges.py", "tests/grants/test_toolprofile_edges.py")),
    Target("coordinator/preflight.py", ("tests/runloop/test_bad_input.py", "tests/runloop/test_tool_dirs.py",
                                        "tests/runloop/test_preflight_edges.py")),
)

# Survivors no test can tell from the original: (path, operator, the original line stripped) -> why.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("coordinator/integration/export_checks.py", "core/ReplaceComparisonOperator_Lt_LtE",
     "before = [r for r in records if r.sequence < promo.sequence]"):
        "the records before the decision feed intoto_statements, which keeps only the sequences the decision's "
        "evidence_refs name; a decision cannot name its own sequence (it is assigned when the decision is "
        "appended), so adding the decision itself changes nothing",
    ("coordinator/integration/gate.py", "core/ReplaceFalseWithTrue", "human: bool = False"):
        "GateState.human's default is never read: check_consent sets it first thing, and a fold the stack "
        "plan stopped returns a ChainResult with human_gate False without reading the state",
    ("coordinator/egress/gate.py", "core/AddNot", "if TYPE_CHECKING:"):
        "the guarded import (ledger.Ledger) only names a type in an annotation; importing it at run time as "
        "well loads a module the coordinator has loaded already and changes no behaviour",
    ("coordinator/grants.py", "core/ReplaceOrWithAnd",
     'if check_revoked and (getattr(tx, "is_revoked", None) or self.ledger.is_revoked)(g.jti, g.profile_id):'):
        "every transaction of dome's ledgers has is_revoked, so the `and` asks the ledger's read connection "
        "instead; a group commit's transaction holds only charges (never a revocation), so both read the "
        "same committed revocations",
    ("coordinator/integration/proposals.py", "core/AddNot", "if TYPE_CHECKING:"):
        "the import under it is for type annotations only (they are strings here); importing ObjectReader "
        "at run time as well changes nothing a caller can see",
    ("coordinator/integration/proposals.py", "core/ReplaceOrWithAnd",
     'g.git(self.repo, "read-tree", _tree or base_ref, env=env)'):
        "read-tree of a commit reads that commit's tree, so the base commit and its tree give the same index; "
        "the tree is never empty here (an unknown base returned before)",
    ("coordinator/integration/proposals.py", "core/ReplaceFalseWithTrue",
     "exists, tree, oids, links = inspector.base(base) if is_git_oid(base) else (False, None, {}, frozenset())"):
        "a base that is not a commit id is refused as PROPOSAL_BASE_NOT_SHA before commit_exists is read, "
        "and the apply check runs only for a base equal to the wave base, which is always a commit id",
    ("coordinator/integration/proposals.py", "core/ReplaceFalseWithTrue",
     "blob_get: Callable[[str], bytes] | None = field(default=None, compare=False, repr=False)"):
        "compare and repr of the blob store's getter: no code compares two CheckedProposals or reads their "
        "repr, so including the getter in either changes nothing a caller can see",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Lt_LtE",
     "before = [r for r in records if r.sequence < promo.sequence]"):
        "`<=` adds only the decision itself; the records before it feed the chain evaluation and the block, "
        "partial, replay, policy and validation-input checks, none of which reads a promotion record, and the "
        "commit list, where the decision's base_ref only adds the facts of the run's base, looked up by id",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Lt_LtE",
     "promos = [r for r in records if r.topic == T_PROMOTION and r.sequence < last]"):
        "`last` is the sequence of a run.finished event, never of a promotion record",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Lt_LtE",
     "refs += statement_blobs(intoto_statements([r for r in records if r.sequence < promo.sequence],"):
        "intoto_statements keeps only the sequences the decision's evidence_refs name, and a decision cannot "
        "name its own sequence (as for export_checks above)",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Lt_LtE", "and promo.sequence < last,"):
        "promo is the promotion decision and `last` the sequence of a run.finished event: two records of one "
        "run never share a sequence number, so `<` and `<=` agree",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Lt_LtE",
     'elif d.get("outcome") == "promoted" and fin.get("status") == "failed" and promo.sequence < last:'):
        "as above: the decision and run.finished are two records, never at one sequence number",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_LtE_Lt",
     "upto = [e for e in events if e.sequence <= last_finish]"):
        "`<` leaves out only the event at last_finish, which is the run.finished record itself (sequences of "
        "a run are unique); the task projection (task_files) reads the folded node and proposal state and "
        "the history rows of attempt topics, and folding run.finished sets only RunState.finished and "
        "last_sequence, which it never reads, so the rebuilt files are the same",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Gt_GtE",
     "rep.check(K.FINISH_AGREES, first is not None and promo.sequence > first,"):
        "as above: the decision is never the first run.finished record itself",
    ("coordinator/integration/verify.py", "core/ReplaceComparisonOperator_Gt_GtE",
     "if gates and asked and asked[-1].sequence > gates[-1].sequence:"):
        "a consent request and a gate decision are two records, and no two records of a run share a "
        "sequence number, so the two can never be equal",
}

# The CI sample: these targets only (fast tests), this many mutants, this seed.
CI_TARGETS = ("export_checks", "integration/gate.py", "tree_rules", "binding", "metering", "sandbox_limits",
              "sandbox_verdict")
CI_SAMPLE, CI_SEED = 24, 31


@dataclass(frozen=True)
class Mutant:
    path: str
    operator: str
    occurrence: int
    line: int
    before: str
    after: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.operator, self.before.strip())

    def describe(self) -> str:
        return f"{self.path}:{self.line} {self.operator.split('/')[-1]}: {self.after.strip()}"


def _function_lines(source: str, names: Iterable[str]) -> list[tuple[int, int]]:
    want = set(names)
    return [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in want]


def statement_lines(source: str) -> dict[int, int]:
    """Line -> the first line of the innermost statement holding it (what coverage.py records)."""
    best: dict[int, tuple[int, int]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt):
            start, end = node.lineno, node.end_lineno or node.lineno
            if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.Try, ast.ClassDef)):
                body = min((c.lineno for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)), default=end + 1)
                end = min(end, body - 1)  # the header only: a body line belongs to its own statement
            for line in range(start, end + 1):
                if line not in best or end - start < best[line][1] - best[line][0]:
                    best[line] = (start, end)
    return {line: span[0] for line, span in best.items()}


def mutants_of(target: Target, root: Path = ROOT) -> Iterator[tuple[Mutant, str]]:
    """Every mutant of a target with the mutated source; lines marked `pragma: no mutate` are left alone."""
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator
    source = (root / target.path).read_text()
    lines = source.splitlines()
    spans = _function_lines(source, target.functions) if target.functions else None
    for name in OPERATORS:
        op = get_operator(name)()
        positions = [start for node in ast_nodes(get_ast(source)) for start, _ in op.mutation_positions(node)]
        for occurrence, (line, _) in enumerate(positions):
            if spans is not None and not any(a <= line <= b for a, b in spans):
                continue
            before = lines[line - 1]
            if "pragma: no mutate" in before or before.lstrip().startswith(("@", "#")):
                continue
            try:
                mutated = mutate_code(source, op, occurrence)
            except (AttributeError, ValueError):  # an operator that cannot rewrite this node
                continue
            if mutated is None or mutated == source:
                continue
            after = mutated.splitlines()[line - 1] if len(mutated.splitlines()) >= line else ""
            yield Mutant(target.path, name, occurrence, line, before, after), mutated


class Sandbox:
    """A hard-linked copy of the checkout where one file at a time is swapped for a mutant."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dome-mutation-"))
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                               capture_output=True, timeout=60).stdout.decode().split("\0")
        for rel in filter(None, files):
            src, dst = ROOT / rel, self.dir / rel
            if not src.is_file() or src.is_symlink():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
        self._stamp = 1_000_000_000

    def put(self, rel: str, text: str) -> None:
        """Replace the file (a new inode: the checkout's copy is never touched), with an mtime of its
        own so that no cached bytecode of an earlier mutant of the same size is taken for it."""
        path = self.dir / rel
        tmp = path.with_name(path.name + ".mutant")
        tmp.write_text(text)
        self._stamp += 7
        os.utime(tmp, (self._stamp, self._stamp))
        os.replace(tmp, path)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def pytest(self, tests: Iterable[str], timeout: float, coverage_of: str | None = None) -> tuple[str, float]:
        """('passed' | 'failed' | 'timeout', seconds); with `coverage_of` (a path), under coverage.py
        recording which test ran each line of that file (`who_ran` reads it)."""
        env = {**os.environ, "PYTHONPATH": str(self.dir), "PYTHONPYCACHEPREFIX": str(self.dir / ".pyc")}
        env.pop("PYTEST_ADDOPTS", None)
        head = [sys.executable, "-m", "pytest"]
        if coverage_of is not None:
            rc = self.dir / ".mutation-coveragerc"
            rc.write_text(f"[run]\ndynamic_context = test_function\ndata_file = {self.dir / '.mutation-coverage'}\n"
                          f"include = {self.dir / coverage_of}\n")
            (self.dir / ".mutation-coverage").unlink(missing_ok=True)
            head = [sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest"]
        argv = [*head, "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow", "--no-header",
                "-o", "addopts=--import-mode=importlib", *tests]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=self.dir, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - t0
        return ("passed" if proc.returncode == 0 else "failed"), time.monotonic() - t0

    def preload(self, tests: Iterable[str]) -> None:
        """Import, in this process, the third-party modules the tests load (never dome's own), so
        that each mutant's forked run starts with them loaded: half a mutant's cost was start-up."""
        mods = sorted({t[:-3].replace("/", ".") for t in tests})
        code = ("import importlib, sys\n"
                f"for m in {mods!r}: importlib.import_module(m)\n"
                f"dome = {DOME_PACKAGES!r}\n"
                "print(' '.join(sorted({n.split('.')[0] for n in sys.modules if n.split('.')[0] not in dome})))")
        env = {**os.environ, "PYTHONPATH": str(self.dir)}
        proc = subprocess.run([sys.executable, "-c", code], cwd=self.dir, env=env, capture_output=True, text=True,
                              timeout=300)
        for name in proc.stdout.split():
            if name.isidentifier() and name not in sys.modules and not name.startswith("_pytest_"):
                try:
                    __import__(name)
                except Exception:  # noqa: BLE001 - a module that will not load here loads in the child
                    pass

    def forked(self, tests: Iterable[str], timeout: float) -> tuple[str, float]:
        """What `pytest` returns, run in a child forked from this process (see `preload`)."""
        argv = ["-q", "-x", "-p", "no:cacheprovider", "-m", "not slow", "--no-header",
                "-o", "addopts=--import-mode=importlib", *tests]
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: the sandbox's dome, never the checkout's
            rc = 3
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                os.chdir(self.dir)
                for name in [n for n in sys.modules if n.split(".")[0] in DOME_PACKAGES]:
                    del sys.modules[name]
                sys.path[:] = [str(self.dir)] + [p for p in sys.path if p and Path(p).resolve() != ROOT]
                sys.pycache_prefix = str(self.dir / ".pyc")
                os.environ.update({"PYTHONPATH": str(self.dir), "PYTHONPYCACHEPREFIX": str(self.dir / ".pyc")})
                os.environ.pop("PYTEST_ADDOPTS", None)
                import pytest
                rc = int(pytest.main(argv))
            finally:
                os._exit(rc)
        deadline = t0 + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                return ("passed" if code == 0 else "failed"), time.monotonic() - t0
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "timeout", time.monotonic() - t0
            time.sleep(0.02)

    def who_ran(self, target: Target) -> dict[int, set[str]]:
        """Statement line -> the test node ids (file::function) that executed it; a line run while
        importing (no test's context) maps to every test file of the target."""
        from coverage import CoverageData
        data = CoverageData(basename=str(self.dir / ".mutation-coverage"))
        data.read()
        files = {t[:-3].replace("/", "."): t for t in target.tests}
        out: dict[int, set[str]] = {}
        for measured in data.measured_files():
            for line, contexts in data.contexts_by_lineno(measured).items():
                ids = out.setdefault(line, set())
                for ctx in contexts:
                    if not ctx:
                        ids.update(target.tests)
                        continue
                    mod = next((m for m in sorted(files, key=len, reverse=True) if ctx.startswith(m + ".")), None)
                    ids.add(f"{files[mod]}::{ctx[len(mod) + 1:].split('.')[0]}" if mod else ctx)
        return out


@dataclass
class Tally:
    killed: int = 0
    survived: int = 0
    timeouts: int = 0
    equivalent: int = 0

    @property
    def judged(self) -> int:
        return self.killed + self.survived + self.timeouts


def judged_before(lines: Iterable[str]) -> set[str]:
    """The mutants (as `Mutant.describe` names them) of an earlier run's --json output."""
    out: set[str] = set()
    for line in lines:
        if line.strip():
            r = json.loads(line)
            out.add(f"{r['path']}:{r['line']} {r['operator'].split('/')[-1]}: {r['after']}")
    return out


def run(targets: list[Target], *, sample: int | None, seed: int, out: list[dict],
        fork: bool = True, log: Path | None = None, exclude: frozenset[str] = frozenset()) -> dict[str, Tally]:
    # an excluded mutant (judged by an earlier run) is left out before the sample is drawn
    chosen: list[tuple[Target, Mutant, str]] = [(t, m, src) for t in targets for m, src in mutants_of(t)
                                                if m.describe() not in exclude]
    if sample is not None and sample < len(chosen):
        chosen = sorted(random.Random(seed).sample(chosen, sample), key=lambda x: (x[1].path, x[1].line))
    tallies = {t.path: Tally() for t in targets}
    box = Sandbox()
    try:
        limits: dict[str, float] = {}
        ran: dict[str, dict[int, set[str]]] = {}
        stmt: dict[str, dict[int, int]] = {}
        for t in targets:
            if any(c[0] is t for c in chosen):
                state, took = box.pytest(t.tests, 1800, coverage_of=t.path)
                if state != "passed":
                    raise SystemExit(f"mutation: the tests of {t.path} fail without a mutant: {' '.join(t.tests)}")
                limits[t.path] = took * 2 + 30
                ran[t.path], stmt[t.path] = box.who_ran(t), statement_lines((ROOT / t.path).read_text())
                print(f"mutation: {t.path}: baseline {took:.1f}s under coverage ({' '.join(t.tests)})",
                      file=sys.stderr)
        if fork:
            box.preload(sorted({f for t in targets for f in t.tests}))
        for i, (target, m, src) in enumerate(chosen, start=1):
            tally = tallies[target.path]
            if m.key in EQUIVALENT:
                tally.equivalent += 1
                continue
            tests = sorted(ran[target.path].get(stmt[target.path].get(m.line, m.line), ()))
            if not tests:
                state, took = "passed", 0.0  # no mapped test executes this statement
            else:
                box.put(target.path, src)
                try:
                    run_one = box.forked if fork else box.pytest
                    state, took = run_one(tests, limits[target.path])
                finally:
                    box.put(target.path, (ROOT / target.path).read_text())
            if state == "passed":
                tally.survived += 1
            elif state == "timeout":
                tally.timeouts += 1
            else:
                tally.killed += 1
            word = "SURVIVED" if state == "passed" else state
            print(f"[{i}/{len(chosen)}] {word} ({len(tests)} tests, {took:.1f}s) {m.describe()}",
                  file=sys.stderr, flush=True)
            out.append({"path": m.path, "line": m.line, "operator": m.operator, "before": m.before.strip(),
                        "after": m.after.strip(), "outcome": state, "seconds": round(took, 2),
                        "tests": len(tests)})
            if log is not None:  # one line per mutant as it is judged: a run cut short keeps what it found
                with log.open("a") as f:
                    f.write(json.dumps(out[-1]) + "\n")
    finally:
        box.close()
    return tallies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", default=[], help="only the targets whose path contains this")
    ap.add_argument("--sample", type=int, help="a deterministic sample of this many mutants")
    ap.add_argument("--seed", type=int, default=CI_SEED)
    ap.add_argument("--ci", action="store_true", help=f"the CI sample: {CI_SAMPLE} mutants of {', '.join(CI_TARGETS)}")
    ap.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    ap.add_argument("--json", type=Path, help="write every mutant's outcome here (JSON lines, as they come)")
    ap.add_argument("--exclude", type=Path, action="append", default=[],
                    help="leave out the mutants an earlier run's --json file judged (before sampling)")
    ap.add_argument("--no-fork", action="store_true", help="start a fresh interpreter for every mutant")
    args = ap.parse_args(argv)
    names = list(CI_TARGETS) if args.ci else args.module
    targets = [t for t in TARGETS if not names or any(n in t.path for n in names)]
    if not targets:
        ap.error(f"no target matches {names}")
    exclude = frozenset().union(*(judged_before(f.read_text().splitlines()) for f in args.exclude))
    if args.list:
        for t in targets:
            for m, _ in mutants_of(t):
                if m.describe() not in exclude:
                    print(m.describe())
        return 0
    sample = CI_SAMPLE if args.ci else args.sample
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the sandbox is removed on the way out
    results: list[dict] = []
    if args.json:
        args.json.write_text("")
    tallies = run(targets, sample=sample, seed=args.seed, out=results, fork=not args.no_fork, log=args.json,
                  exclude=exclude)
    bad = 0
    for path, t in tallies.items():
        if not t.judged and not t.equivalent:
            continue
        rate = 100.0 * (t.killed + t.timeouts) / t.judged if t.judged else 100.0
        print(f"{path}: {t.killed + t.timeouts}/{t.judged} killed ({rate:.1f}%), {t.survived} survived, "
              f"{t.timeouts} by time-out, {t.equivalent} equivalent (not run)")
        bad += t.survived
    for r in results:
        if r["outcome"] == "passed":
            why = "" if r["tests"] else " (no mapped test runs it)"
            print(f"  survivor {r['path']}:{r['line']} {r['operator'].split('/')[-1]}: {r['after']}{why}")
    total = sum(t.judged for t in tallies.values())
    killed = sum(t.killed + t.timeouts for t in tallies.values())
    print(f"total: {killed}/{total} killed" + (f" ({100.0 * killed / total:.1f}%)" if total else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
