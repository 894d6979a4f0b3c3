"""`finish_run(ctx)`: the one entry point the run loop calls after its tasks.

verify proposals -> plan -> stack on the canvas -> validate (speculative,
bisect on failure) -> gate -> promote, or end blocked naming every missing
link, or hold at the human gate with a single-use consent token.
Every artifact is signed and appended to the ledger as it is produced.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ledger.paging import iter_events
from ledger.protocols import EventLog
from ledger.clock import utc_now as ledger_utc_now
from registry import diffs
from registry.canonical import canonical_json
from registry.errors import DomeError
from registry.signing import Keyring, SigningKey, dsse_sign

from .canvas import Canvas
from . import gitio
from .evidence import (INTOTO_PAYLOAD, TARGET_CHECKED_OUT, TARGET_MOVED, T_CONSENT_REQ, T_GATE, T_PLAN,
                       T_POLICY, T_PROMOTION, T_PROPOSAL, T_REJECTED, T_REQUIREMENTS, T_SELECTION, ChainResult, Record, intoto_statements)
from .gate import evaluate_chain
from .planning import Candidate, final_plan, plan_stack
from .policy import IntegrationPolicy, risk_level
from .proposals import BaseInspector, is_dependency_file, verify_proposal
from .recorder import (INTEGRATION_PREFIXES, Emitter, RunRecords, blobs_of, event_count, git_facts,
                       records_of, run_dir, write_json)
from .stacking import Stacker, Validator
from .validation import SuiteRunner, suite_name
from .validation_inputs import judged_by, repo_globs, required_inputs

EXIT_OK, EXIT_BLOCKED, EXIT_FAILED = 0, 4, 5
ZERO = "0" * 40


class PromotionError(DomeError):
    """The decision said promote but the target ref did not end at the head."""
    code = "PROMOTION_REF_UPDATE_FAILED"


utc_now = ledger_utc_now  # RFC 3339 UTC with microseconds, the ledger's clock


@dataclass
class FinishContext:
    run_id: str
    repo: Path
    base_ref: str
    proposals: Sequence[Mapping[str, Any]]
    ledger: EventLog
    signing_key: SigningKey
    ops_root: Path
    validations: Sequence[Mapping[str, Any]] = ()
    policy: IntegrationPolicy | None = None
    keyring: Keyring | None = None
    seed: int = 0
    promote_to: str | None = None
    diff_loader: Callable[[Mapping[str, Any]], bytes | None] | None = None
    resolver_hook: Callable[[dict[str, Any]], Any] | None = None
    critical_ids: frozenset[str] = frozenset()
    sandbox: str = "bwrap"
    validator: Validator | None = None
    clock: Callable[[], str] = utc_now
    wave_id: str | None = None
    wave_bases: frozenset[str] = frozenset()
    """Integration heads of this run that later waves started from: a proposal
    on one is checked against it and applied three-way on the head."""
    task_meta: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """node_id -> {"risk", "atomicity"} from the (admin-authored) work queue: a
    task's risk is a floor a worker cannot talk down, its atomicity wins."""
    tasks_not_landed: Sequence[Mapping[str, str]] = ()
    """A partial run (`if_tasks_fail: promote_rest`): the tasks whose work is not
    in these proposals ({node_id, status}); recorded with the inputs, named by the gate."""
    derivation_pool: Sequence[Mapping[str, Any]] | None = None
    """Every accepted proposal of the run so far, when `proposals` is one in-run batch:
    a derived base may hold an ancestor's proposal integrated in an earlier batch."""


@dataclass
class FinishResult:
    status: str  # promoted | blocked | awaiting_consent | failed (the ref could not be moved)
    run_id: str
    base_ref: str
    head_ref: str | None
    included: list[str]
    missing: list[str]
    why_blocked: dict[str, Any]
    gate: dict[str, Any]
    promotion: dict[str, Any] | None
    consent_token: str | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None  # why a promoted decision did not move the ref

    @property
    def exit_code(self) -> int:
        return {"promoted": EXIT_OK, "failed": EXIT_FAILED}.get(self.status, EXIT_BLOCKED)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id, "base_ref": self.base_ref,
                "head_ref": self.head_ref, "included_proposals": self.included,
                "missing": self.missing, "why_blocked": self.why_blocked,
                "rejected": self.rejected,
                "promotion": self.promotion, "awaiting_consent": self.consent_token is not None,
                "error": self.error}


def default_diff_loader(ledger: EventLog) -> Callable[[Mapping[str, Any]], bytes | None]:
    def load(p: Mapping[str, Any]) -> bytes | None:
        if p.get("diff_unified") is not None:
            return str(p["diff_unified"]).encode("utf-8", "surrogateescape")
        ref, store = p.get("diff_ref"), blobs_of(ledger)
        if ref and store is not None:
            try:
                return store.get(ref)
            except Exception:  # noqa: BLE001 - a missing blob is a rejected proposal
                return None
        return None
    return load


def unwrap_proposal(p: Mapping[str, Any]) -> Mapping[str, Any]:
    """A PatchProposal from either the proposal itself or a `patch.submitted`
    event payload that carries it under "proposal"."""
    inner = p.get("proposal")
    if isinstance(inner, Mapping) and "proposal_id" in inner:
        out = dict(inner)
        for k in ("diff_ref", "diff_digest"):
            if k not in out and k in p:
                out[k] = p[k]
        return out
    return p


def apply_task_meta(p: Mapping[str, Any], task_meta: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    meta = task_meta.get(str(p.get("node_id") or (p.get("worker_run_meta") or {}).get("node_id") or ""))
    if not meta:
        return p
    out = dict(p)
    from .planning import RISK_SCORE
    task_risk = risk_level(meta.get("risk")) if meta.get("risk") is not None else None
    if task_risk is not None and RISK_SCORE[task_risk] > RISK_SCORE[risk_level(p.get("risk"))]:
        risk = dict(p["risk"]) if isinstance(p.get("risk"), Mapping) else {}
        risk["class"] = task_risk
        risk.pop("level", None)
        out["risk"] = risk
    if meta.get("atomicity"):
        out["atomicity"] = meta["atomicity"]
    return out


def finish_run(ctx: FinishContext) -> FinishResult:
    # the integration and derived-base records are read once here, and at the gate only those appended since
    scan = RunRecords(ctx.ledger, ctx.run_id, also=frozenset({T_BASE_DERIVED}))
    done = recorded_result(ctx.ledger, ctx.run_id, records=scan.integration)
    if done is not None:  # resumed after the decision: nothing is applied or promoted twice
        if done.promotion is not None:  # a kill may have come before its files were written
            export_promotion(records_of(ctx.ledger, ctx.run_id), done.promotion, ctx.signing_key, ctx.ops_root,
                             ctx.run_id)
        return finish_recorded_promotion(Path(ctx.repo), done)
    policy = ctx.policy or IntegrationPolicy.load()
    keyring = ctx.keyring or Keyring({ctx.signing_key.kid: ctx.signing_key.public})
    emit = Emitter(ctx.ledger, ctx.run_id, ctx.signing_key, ctx.clock, ctx.wave_id,
                   replay=scan.integration)
    to_ref = ctx.promote_to or policy.promote_to
    record_inputs(ctx, emit, policy, to_ref)
    with gitio.ObjectReader(ctx.repo) as reader, _writes_held(emit):  # the reader is shared with the canvas
        checked, rejected = record_verified_proposals(ctx, emit, policy, reader, derived_records=scan.other)
        cands = [Candidate.from_proposal(c.proposal, c.fingerprints, list(c.touched), policy,
                                         ctx.critical_ids) for c in checked.values()]
        plan, index = plan_stack(cands, base_ref=ctx.base_ref, seed=ctx.seed, policy=policy,
                                 rejected=rejected, run_id=ctx.run_id, created_at=ctx.clock())
        emit(T_PLAN, plan.to_dict())
        emit(T_SELECTION, plan.selection_decision())
        why = _stack_and_validate(ctx, emit, policy, checked, plan, index, reader)
    return gate_and_promote(ctx.ledger, ctx.run_id, repo=Path(ctx.repo), key=ctx.signing_key,
                            keyring=keyring, policy=policy, to_ref=to_ref, ops_root=ctx.ops_root,
                            emit=emit, why=why, rejected=[{"proposal_id": p, **r.to_dict()}
                                                          for p, r in rejected],
                            base_ref=ctx.base_ref, records=scan.refresh())


@contextmanager
def _writes_held(emit: Emitter) -> Iterator[None]:
    """On the way out, an error included, the records the emitter still holds are written
    (the steps they record happened)."""
    try:
        yield
    finally:
        emit.flush()


def record_inputs(ctx: FinishContext, emit: Emitter, policy: IntegrationPolicy, to_ref: str) -> None:
    """Record what the gate reads first: the policy in force and the suites the queue requires."""
    emit(T_POLICY, {"artifact_kind": "dome.integration_policy/v1", "policy": policy.to_dict(),
                    "policy_digest": policy.digest, "policy_version": f"{policy.name}@{policy.version}"})
    required_wq = sorted({suite_name(v) for v in ctx.validations if v.get("required", True)})
    emit(T_REQUIREMENTS, {"artifact_kind": "dome.integration_requirements/v1",
                          "required_suites": required_wq, "repo": str(Path(ctx.repo).resolve()),
                          "promote_to": to_ref, "base_ref": ctx.base_ref,
                          "validations": [dict(v) for v in ctx.validations],
                          **({"tasks_not_landed": [dict(t) for t in ctx.tasks_not_landed]}
                             if ctx.tasks_not_landed else {})})


def _reject(emit: Emitter, rejected: list, pid: str, p: Mapping[str, Any], rej: Sequence[Any]) -> None:
    emit(T_REJECTED, {"artifact_kind": "dome.proposal_rejection/v1", "proposal_id": pid,
                      "diff_digest": p.get("diff_digest"), "rejections": [r.to_dict() for r in rej]})
    rejected.extend((pid, r) for r in rej)


def record_verified_proposals(ctx: FinishContext, emit: Emitter, policy: IntegrationPolicy,
                              reader: gitio.ObjectReader, derived_records: Sequence[Record] | None = None
                              ) -> tuple[dict[str, Any], list]:
    """Step 1: check every proposal on its own and record each verdict; returns (checked by id, rejections).
    `derived_records`: the run's `task.base_derived` records, when the caller has read them."""
    from .proposals import INTEGRITY, REDUNDANT, Rejection

    load = ctx.diff_loader or default_diff_loader(ctx.ledger)
    proposals = [apply_task_meta(unwrap_proposal(p), ctx.task_meta) for p in ctx.proposals]
    pool = proposals if ctx.derivation_pool is None else [
        *proposals, *(unwrap_proposal(p) for p in ctx.derivation_pool)]
    derived = derived_bases(ctx.ledger, ctx.run_id, ctx.base_ref, records=derived_records)
    derived_trees: dict[str, str] = {}
    checked: dict[str, Any] = {}
    rejected: list = []
    insp = BaseInspector(ctx.repo, reader)
    inputs = validation_inputs(ctx, policy)
    all_inputs = tuple(sorted({g for globs in inputs.values() for g in globs}))
    for p in sorted(proposals, key=lambda p: (str(p.get("proposal_id")), str(p.get("created_at")))):
        pid = str(p.get("proposal_id"))
        wave_base = ctx.base_ref
        pbase = str(p.get("base_ref", ""))
        if pbase != ctx.base_ref and pbase in derived:
            err = _rebuild_derived_base(ctx, derived[pbase], pool, load, reader, insp,
                                        derived_trees, pbase)
            if err is not None:
                _reject(emit, rejected, pid, p, [Rejection("PROPOSAL_DERIVED_BASE_MISMATCH", err, INTEGRITY,
                                                           {"base_ref": pbase})])
                continue
            wave_base = pbase
            p = {**p, "_requires": [a["proposal_id"] for a in derived[pbase]["applied"]]}
        elif pbase in ctx.wave_bases:
            wave_base = pbase
        rej, cp = verify_proposal(p, load(p), wave_base=wave_base, policy=policy, inspector=insp,
                                  inputs=all_inputs)
        if pid in checked:
            rej, cp = [Rejection("PROPOSAL_DUPLICATE_ID", "proposal id already submitted", REDUNDANT)], None
        if cp is None:
            _reject(emit, rejected, pid, p, rej)
            continue
        store = blobs_of(ctx.ledger)
        blob = store.put(cp.canonical) if store is not None else None
        emit(T_PROPOSAL, {"artifact_kind": "dome.proposal_verification/v1", "proposal_id": pid,
                          "diff_digest": cp.diff_digest, "diff_blob": blob,
                          "diff_canonicalization": diffs.DIFF_CANONICALIZATION,
                          "base_ref": ctx.base_ref, "base_tree_hash": p.get("base_tree_hash"),
                          "proposal_base_ref": p.get("base_ref"),
                          "requires": list(p.get("_requires", [])),
                          **({"resolves": dict(p["resolves"])} if isinstance(p.get("resolves"), Mapping) else {}),
                          "risk": cp.risk, "touched_files": list(cp.touched),
                          "atomicity": p.get("atomicity", "atomic_proposal"),
                          "node_id": p.get("node_id"), "hunk_fingerprints": len(cp.fingerprints),
                          "computed_risk": cp.computed_risk, "protected_paths": list(cp.protected),
                          **({"risk_rises": [r.to_dict() for r in cp.rises]} if cp.rises else {}),
                          **({"declared_risk": risk_level(p.get("risk"))}
                             if risk_level(p.get("risk")) != "low" else {}),
                          **({"dependency_files": [f for f in list(cp.touched) if is_dependency_file(f, policy)]}
                             if isinstance(p.get("risk"), Mapping) and p["risk"].get("deps_touched") else {}),
                          **({"validation_inputs_changed": {"paths": list(cp.inputs_changed),
                                                            "suites": judged_by(cp.inputs_changed, inputs)}}
                             if cp.inputs_changed else {})})
        # the diff is in the blob store now: keep only what the plan needs, read it back to apply it
        checked[pid] = cp.released(blob, store.get) if store is not None and blob is not None else cp
    emit.flush()  # the verdicts, in one commit
    return checked, rejected


def validation_inputs(ctx: FinishContext, policy: IntegrationPolicy) -> dict[str, tuple[str, ...]]:
    """Required suite name -> the globs of its inputs (the queue's entry, the defaults, the base's
    `.dome/validation-inputs`); nothing where the policy opts the repository out."""
    if policy.validation_inputs_from == "head":
        return {}
    return required_inputs(ctx.validations, repo_globs(ctx.repo, ctx.base_ref))


def _stack_and_validate(ctx: FinishContext, emit: Emitter, policy: IntegrationPolicy, checked: Mapping[str, Any],
                        plan: Any, index: Any, reader: gitio.ObjectReader) -> dict[str, Any]:
    """Steps 3 and 4: stack the plan on the canvas, validate (bisect on failure),
    record the final plan. Returns why each proposal left out was left out."""
    canvas = Canvas(ctx.repo, ctx.base_ref, run_id=ctx.run_id,
                    workdir=run_dir(ctx.ops_root, ctx.run_id) / "canvas",
                    max_binary_bytes=policy.max_binary_bytes, reader=reader, policy=policy)
    try:
        stacker = Stacker(canvas, checked, plan, index, policy, emit=emit,
                          resolver_hook=ctx.resolver_hook,
                          requires={pid: tuple(c.proposal.get("_requires", ())) for pid, c in checked.items()},
                          base_inputs=validation_inputs(ctx, policy))
        state = stacker.run()
        risks = {checked[l.proposal_id.split(":split-")[0]].risk for l in state.layers}
        suites = suites_for(ctx.validations, policy, risks, bool(state.derived))
        if state.layers and suites:
            validator = ctx.validator or SuiteRunner(
                ctx.repo, sandbox=ctx.sandbox,
                put_artifact=store.put if (store := blobs_of(ctx.ledger)) is not None else None)
            stacker.validate(suites, validator)
        included = list(canvas.included)
        digests = {l.proposal_id: l.diff_digest for l in state.layers}
        atom = {pid: str(c.proposal.get("atomicity", "atomic_proposal")) for pid, c in checked.items()}
        not_applied = {pid: why for pid, why in state.why_blocked.items()
                       if why.get("state") not in ("applied",) and pid not in included}
        fplan = final_plan(plan, included=included, digests=digests, atomicity=atom,
                           not_applied=not_applied,
                           expected_validations=[suite_name(s) for s in suites], run_id=ctx.run_id)
        emit(T_PLAN, fplan.to_dict())
        return dict(state.why_blocked)
    finally:
        canvas.close()


T_BASE_DERIVED = "task.base_derived"


def derived_bases(ledger: EventLog, run_id: str, run_base: str,
                  records: Sequence[Record] | None = None) -> dict[str, dict[str, Any]]:
    """Derived bases the run loop built for dependent tasks (`task.base_derived`):
    run base + the listed proposals applied in order. `records`: those events, when
    the caller has read them (else the run's events are read, a page at a time)."""
    out: dict[str, dict[str, Any]] = {}
    try:
        for r in (records if records is not None else _base_derived_records(ledger, run_id)):
            a = r.artifact
            if r.topic == T_BASE_DERIVED and a.get("parent") == run_base and a.get("base_ref"):
                out[str(a["base_ref"])] = dict(a)
    except Exception:  # noqa: BLE001
        return {}
    return out


def _base_derived_records(ledger: EventLog, run_id: str) -> Iterator[Record]:
    for e in iter_events(ledger, run_id, topics={T_BASE_DERIVED}):  # only these few records are read
        yield Record.from_event(e)


def _rebuild_derived_base(ctx: FinishContext, d: Mapping[str, Any], proposals: Sequence[Mapping[str, Any]],
                          load: Callable[[Mapping[str, Any]], bytes | None], reader: Any,
                          insp: BaseInspector, cache: dict[str, str], base_ref: str) -> str | None:
    """Rebuild a derived base from the run base and the proposals it names;
    its tree must be the one the proposal (and the event) claim. None = ok."""
    if base_ref in cache:
        return None
    by_id = {str(p.get("proposal_id")): p for p in proposals}
    canvas = Canvas(ctx.repo, ctx.base_ref, run_id=f"{ctx.run_id}-derive", create_worktree=False,
                    reader=reader, policy=ctx.policy)
    try:
        for a in d.get("applied", []):
            src = by_id.get(str(a.get("proposal_id")))
            raw = load(src) if src is not None else None
            if raw is None:
                return f"proposal {a.get('proposal_id')} of the derived base is not available"
            parsed = diffs.parse_diff(raw)
            if diffs.diff_digest(raw) != a.get("diff_digest"):
                return f"proposal {a.get('proposal_id')} digest differs from the derivation"
            att = canvas.try_apply(parsed)
            if not att.clean:
                return f"proposal {a.get('proposal_id')} does not apply while rebuilding the base"
            canvas.commit(att, [str(a.get("proposal_id"))])
        tree = canvas.tree.write()
        canvas.store.flush()
    except diffs.DiffError as exc:
        return exc.message
    finally:
        canvas.close()
    if tree != d.get("base_tree_hash"):
        return "rebuilt derived base tree differs from the recorded one"
    cache[base_ref] = tree
    insp.register_virtual_base(base_ref, tree)
    return None


def recorded_result(ledger: EventLog, run_id: str, records: Sequence[Record] | None = None
                    ) -> FinishResult | None:
    """The outcome already in the ledger (a promotion decision, or a run held
    at the human gate), or None when the integration stage has not decided.
    `records`: the run's integration records, when the caller has read them."""
    if records is None:
        records = records_of(ledger, run_id, prefixes=INTEGRATION_PREFIXES)
    promos = [r for r in records if r.topic == T_PROMOTION]
    gates = [r for r in records if r.topic == T_GATE]
    gate = dict(gates[-1].artifact) if gates else {}
    if promos:
        d = dict(promos[-1].artifact)
        return FinishResult(str(d["outcome"]), run_id, str(d.get("base_ref") or ""),
                            d.get("from_head_ref"), list(d.get("included_proposals", [])),
                            list(d.get("missing", [])), {}, gate, d)
    waiting = [r for r in records if r.topic == T_CONSENT_REQ]
    if waiting and gates and waiting[-1].sequence > gates[-1].sequence:
        return FinishResult("awaiting_consent", run_id, str(gate.get("base_ref") or ""),
                            gate.get("head_ref"), list(gate.get("included_proposals", [])),
                            list(gate.get("missing", [])), {}, gate, None)
    return None


def suites_for(validations: Sequence[Mapping[str, Any]], policy: IntegrationPolicy, risks: set[str],
               split: bool) -> list[dict[str, Any]]:
    """The suites to run on the head: the queue's, the policy's for these risks (and for a split)."""
    by_name = {suite_name(v): dict(v) for v in validations}
    names = set(by_name) | set(policy.required_suites(risks))
    if split:
        names |= set(policy.escalate_on_split)
    out = []
    for n in sorted(names):
        if n in by_name:
            out.append(by_name[n])
        elif n == "litho.resim":  # needs no configuration: it re-checks every committed mask
            out.append({"suite": n, "name": n})
        # a policy suite the work queue does not define cannot run: the gate names it
        # missing. `drc` is one: it needs a deck and layouts, and a deckless drc suite
        # would error on every head and get an innocent proposal ejected by the bisect.
    return out


def gate_and_promote(ledger: EventLog, run_id: str, *, repo: Path, key: SigningKey, keyring: Keyring,
                     policy: IntegrationPolicy | None, to_ref: str, ops_root: Path, emit: Emitter,
                     why: dict[str, Any] | None = None, rejected: list | None = None,
                     base_ref: str = "", issue_consent: bool = True,
                     tasks_not_landed: Sequence[Mapping[str, Any]] | None = None,
                     records: Sequence[Record] | None = None) -> FinishResult:
    """`records`: the run's integration records, read after the last of them was written
    (else they are read here); they are all the gate reads."""
    if records is None:
        records = records_of(ledger, run_id, prefixes=INTEGRATION_PREFIXES)
    if policy is None:
        from .evidence import policy_from_record
        pol = [r for r in records if r.topic == T_POLICY]
        policy = policy_from_record(pol[-1].artifact) if pol else None
    facts = git_facts(repo, records)
    chain = evaluate_chain(records, keyring=keyring, facts=facts, run_id=run_id, policy=policy)
    gate = {"artifact_kind": "dome.gate.decision/v1", "decision_id": f"gate-{run_id}-{event_count(ledger, run_id)}",
            "passed": chain.passed, **chain.to_dict(),
            "reason_codes": sorted({l.link.split(":")[0] + "_" + l.status for l in chain.links
                                    if l.status != "ok"}),
            **partial_of(records, tasks_not_landed)}
    signed_gate = emit(T_GATE, gate)
    write_json(run_dir(ops_root, run_id) / "gate" / "gate.decision.json", signed_gate)
    consent_token = None
    if not chain.passed and chain.only_consent_missing and issue_consent and chain.head_ref:
        consent_token = secrets.token_hex(32)  # hex: a person pastes it after --consent; never starts with "-"
        ttl = (policy or IntegrationPolicy()).consent_ttl_seconds
        expires = (_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=ttl)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        token_file = run_dir(ops_root, run_id) / "gate" / "consent.token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:  # admin-only, like ops/keys; only its digest is in the ledger
            fh.write(consent_token + "\n")
        emit(T_CONSENT_REQ, {"artifact_kind": "dome.consent_request/v1",
                             "consent_id": "consent-" + secrets.token_hex(8),
                             "head_ref": chain.head_ref, "to_ref": to_ref,
                             "token_digest": token_digest(consent_token), "expires_at": expires})
        return FinishResult("awaiting_consent", run_id, chain.base_ref or base_ref, chain.head_ref,
                            chain.included, chain.missing, why or {}, signed_gate, None,
                            consent_token, rejected or [])
    promotion = promote(ledger, run_id, repo=repo, chain=chain, to_ref=to_ref, emit=emit,
                        ops_root=ops_root, key=key, policy=policy, records=records)
    return finish_recorded_promotion(repo, FinishResult(
        promotion["outcome"], run_id, chain.base_ref or base_ref, chain.head_ref, chain.included,
        list(promotion.get("missing", [])), why or {}, signed_gate, promotion, None, rejected or []))


def partial_of(records: Sequence[Record], tasks_not_landed: Sequence[Mapping[str, Any]] | None = None
               ) -> dict[str, Any]:
    """What the gate says of a partial run: the tasks not landed as the finish stage
    names them, else as the recorded inputs name them (integration at the finish),
    else as the previous gate did (`dome promote` after consent); nothing for a run
    whose every task landed."""
    rows: Any = [dict(t) for t in tasks_not_landed] if tasks_not_landed is not None else None
    for topic in (T_REQUIREMENTS, T_GATE):
        if rows is None:
            recs = [r for r in records if r.topic == topic]
            rows = recs[-1].artifact.get("tasks_not_landed") if recs else None
    return {"partial": True, "tasks_not_landed": list(rows)} if rows else {}


def token_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def promote(ledger: EventLog, run_id: str, *, repo: Path, chain: ChainResult, to_ref: str, emit: Emitter,
            ops_root: Path, key: SigningKey, policy: IntegrationPolicy | None,
            records: Sequence[Record]) -> dict[str, Any]:
    """Write the PromotionDecision; move `to_ref` only when the chain passed."""
    missing = list(chain.missing)
    previous = gitio.ref_target(repo, to_ref)
    outcome = "promoted" if chain.passed else "blocked"
    if outcome == "promoted":
        assert chain.head_ref is not None
        if previous is not None and not gitio.is_ancestor(repo, previous, chain.head_ref):
            outcome = "blocked"
            missing.append(f"target:{to_ref}: invalid {TARGET_MOVED}")
    holder = gitio.worktree_holding(repo, to_ref) if outcome == "promoted" else None
    if holder is not None:
        outcome = "blocked"
        missing.append(f"target:{to_ref}: invalid {TARGET_CHECKED_OUT}{holder}; "
                       "dome does not move a branch under someone's files)")
    pol = policy or IntegrationPolicy()
    decision = {
        "artifact_kind": "dome.promotion_decision/v1",
        "decision_id": f"promo-{run_id}-{len(records)}",
        "outcome": outcome, "from_head_ref": chain.head_ref or chain.base_ref or ZERO,
        "to_ref": to_ref, "policy_version": f"{pol.name}@{pol.version}",
        "policy_digest": pol.digest,
        "base_ref": chain.base_ref, "stack_plan_id": chain.stack_plan_id,
        "included_proposals": chain.included, "required_suites": chain.required_suites,
        "evidence_refs": chain.evidence_refs, "missing": missing,
        "human_approval": {"required": chain.human_gate},
    }
    if previous:
        decision["previous_target"] = previous
    signed = emit(T_PROMOTION, decision)
    export_promotion(records, signed, key, ops_root, run_id)
    return signed


def export_promotion(records: Sequence[Record], decision: Mapping[str, Any], key: SigningKey, ops_root: Path,
                     run_id: str) -> None:
    """promotion/promotion.decision.json and its in-toto evidence (rewritten alike on resume)."""
    out_dir = run_dir(ops_root, run_id) / "promotion"
    write_json(out_dir / "promotion.decision.json", decision)
    export_intoto(records, decision, key, out_dir)


def move_target(repo: Path, run_id: str, decision: Mapping[str, Any]) -> None:
    """Move the decision's target ref to its head by compare-and-swap from the
    target the decision saw, and check that it points at the head afterwards.
    A ref already at the head is done (a coordinator killed after the swap);
    anything else raises PromotionError and the ref is left as it is."""
    to_ref, head = str(decision["to_ref"]), str(decision["from_head_ref"])
    previous = decision.get("previous_target")
    now = gitio.ref_target(repo, to_ref)
    if now != head:
        if now != previous:
            raise PromotionError(f"{to_ref} moved since the promotion decision (now {now}, decided from "
                                 f"{previous})", code="PROMOTION_TARGET_MOVED",
                                 details={"to_ref": to_ref, "now": now, "expected": previous, "head": head},
                                 hints=["start a new run on the new target"])
        proc = gitio.git(repo, "update-ref", "-m", f"dome promote {run_id}", to_ref, head, previous or ZERO,
                         check=False)
        if proc.returncode != 0:
            raise PromotionError(f"cannot move {to_ref}: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}",
                                 details={"to_ref": to_ref, "head": head, "expected": previous},
                                 hints=["check that the repository is writable and the ref is not locked"])
    if gitio.ref_target(repo, to_ref) != head:
        raise PromotionError(f"{to_ref} does not point at the promoted head {head} after the update",
                             details={"to_ref": to_ref, "head": head})


def finish_recorded_promotion(repo: Path, result: FinishResult) -> FinishResult:
    """Complete a recorded `promoted` decision: the ref moves (or is checked to
    have moved) before the run may say promoted; otherwise it ends failed, with why."""
    if result.status != "promoted" or result.promotion is None:
        return result
    try:
        move_target(repo, result.run_id, result.promotion)
    except PromotionError as exc:
        result.status, result.error = "failed", exc.to_object()
    return result


def export_intoto(records: Sequence[Record], decision: Mapping[str, Any], key: SigningKey,
                  out_dir: Path) -> Path:
    """The evidence the decision references (and the decision) as in-toto v1
    Statements in DSSE envelopes, one per line."""
    lines = [json.dumps(dsse_sign(INTOTO_PAYLOAD, canonical_json(stmt), key), sort_keys=True)
             for stmt in intoto_statements(records, decision)]
    path = out_dir / "evidence.intoto.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
