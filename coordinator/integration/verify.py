"""Offline re-check of a run (`dome verify RUN_ID`).

Nothing is trusted from the run's own conclusions: the chain is evaluated
again from the ledger records, every git object read is re-hashed, every
layer's canonical diff is re-digested and re-applied to its parent
checkpoint (the resulting tree must equal the checkpoint's tree), the
target ref must contain the promoted head, the ledger's hash chain and
signatures are checked, a run the run loop started must have finished with
only signed records after `run.finished`, and every file exported under
ops/runs/<run_id>/ must be what the ledger records (export_checks).

The result is a VerifyReport of typed CheckResults (verify_result).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ledger import EventRecord, Ledger, RecordUnreadable
from registry import diffs
from registry.canonical import digest_bytes, digest_json
from registry.errors import DomeError, SignatureError
from registry.signing import Keyring

from coordinator.run_payloads import LISTS_REF, finish_lists

from .canvas import Canvas
from . import export_checks as exports
from .blob_refs import check_blobs, events_blobs, statement_blobs
from . import gitio
from .evidence import (TARGET_CHECKED_OUT, TARGET_MOVED, T_APPLY, T_CONSENT_REQ, T_GATE, T_POLICY, T_PROMOTION,
                       T_PROPOSAL, T_REQUIREMENTS, ChainResult, GitFacts, Record, body_of, intoto_statements,
                       verify_artifact)
from .gate import evaluate_chain
from .recorder import records_of, run_dir
from .verify_result import CheckKind, CheckResult, RunVerdict, Status, VerifyReport, failed, missing, ok

__all__ = ["CheckKind", "CheckResult", "RunVerdict", "Status", "VerifyReport", "verify_run"]
K = CheckKind  # the short name the many checks below use


def _ledger_chain(ledger: Ledger, keyring: Keyring) -> CheckResult:
    try:
        rep = ledger.verify(keyring)
    except DomeError as exc:
        return failed(K.LEDGER_CHAIN, f"{exc.code}: {exc.message}")
    if rep.ok:
        return ok(K.LEDGER_CHAIN)
    return failed(K.LEDGER_CHAIN, "; ".join(f"{p.code} run {p.run_id} #{p.sequence}"
                                            for p in rep.problems[:10]))


def verify_run(ledger: Ledger, run_id: str, keyring: Keyring, *, repo: Path | None = None,
               ops_root: Path | None = None) -> VerifyReport:
    """Every check of one run; never raises for what it finds (only for a ledger it cannot read)."""
    rep = VerifyReport(run_id)
    rep.add(_ledger_chain(ledger, keyring))
    try:
        events: list[EventRecord] = ledger.events(run_id)
    except RecordUnreadable as exc:  # changed outside dome: a finding, named like the others
        rep.add(failed(K.LEDGER_CHAIN, f"{exc.code}: {exc.message}"))
        return rep
    chain_faults: list = []
    records = records_of(ledger, run_id, chain_faults)
    if not events:
        rep.add(missing(K.RUN_EXISTS, "no events for this run"))
        return rep
    rep.add(ok(K.RUN_EXISTS))
    for where, exc in chain_faults:  # the record keeps its chain reference, so its signature fails too
        rep.add(failed(K.LIST_CHAIN, f"{exc.code}: {exc.message}", where))
    started, first_finish, last_finish = _lifecycle(rep, events, keyring)
    _finish_lists(rep, ledger, events, last_finish, records)
    _exports(rep, ledger, run_id, events, records, keyring, started=started, last_finish=last_finish,
             ops_root=Path(ops_root) if ops_root is not None else ledger.ops_root)
    promos = [r for r in records if r.topic == T_PROMOTION]
    _attested_blobs(rep, ledger, events, records, promos[-1] if promos else None)
    if not promos:
        _without_decision(rep, records, keyring)
        return rep
    rep.add(ok(K.PROMOTION_DECISION))
    promo = promos[-1]
    try:
        verify_artifact(promo.artifact, keyring)
        rep.add(ok(K.PROMOTION_SIGNATURE))
    except SignatureError as exc:
        rep.add(failed(K.PROMOTION_SIGNATURE, f"{exc.code}: {exc.message}"))
    d = promo.artifact
    rep.head_ref, rep.to_ref, rep.outcome = d.get("from_head_ref"), d.get("to_ref"), d.get("outcome")
    _finish_agrees(rep, events, first_finish, last_finish, promo)
    rep.check(K.PROMOTION_OUTCOME, d.get("outcome") in ("promoted", "blocked"),
              f"unknown outcome {d.get('outcome')!r}")
    meta = [r for r in records if r.topic == T_REQUIREMENTS]
    repo = repo or (Path(meta[-1].artifact["repo"]) if meta else None)
    if repo is None or not Path(repo).exists():
        rep.add(missing(K.REPOSITORY, "repository not found", str(repo) if repo else None))
        return rep
    rep.add(ok(K.REPOSITORY))
    before = [r for r in records if r.sequence < promo.sequence]
    bad_sigs = []
    for r in records:
        if r.topic.split(".")[0] in ("integration", "gate", "promotion"):
            try:
                verify_artifact(r.artifact, keyring)
            except SignatureError as exc:
                bad_sigs.append(f"#{r.sequence} {r.topic}: {exc.code}")
    rep.check(K.RECORD_SIGNATURES, not bad_sigs, "; ".join(bad_sigs[:10]))

    # evidence references resolve to the records, digests equal
    by_seq = {r.sequence: r for r in records}
    for ref in d.get("evidence_refs", []):
        r = by_seq.get(int(ref.get("event_sequence", -1)))
        good = r is not None and digest_json(body_of(r.artifact)) == ref.get("digest") \
            and r.artifact.get("payload_digest") == ref.get("digest")
        rep.check(K.EVIDENCE_REF, good, "referenced record missing or changed",
                  f"{ref.get('kind')}:{ref.get('object_id')}")

    # git facts, every object re-hashed
    with gitio.ObjectReader(repo, verify=True) as reader:
        commits: set[str] = set()
        for r in before:
            for k in ("head_ref", "base_ref", "commit", "parent"):
                v = r.artifact.get(k)
                if isinstance(v, str) and len(v) == 40:
                    commits.add(v)
        try:
            facts = GitFacts(commits=gitio.commit_facts(reader, sorted(commits)))
        except gitio.GitError as exc:
            rep.add(failed(K.GIT_OBJECTS, f"{exc.code}: {exc.message}", exc.details.get("oid")))
            return rep
    chain = evaluate_chain(before, keyring=keyring, facts=facts, run_id=run_id)
    if d.get("outcome") == "blocked":
        _block_agrees(rep, repo, before, d, chain)
    else:
        _chain_links(rep, chain)
    _partial(rep, events, before, last_finish, chain.included)
    rep.check(K.PROMOTED_HEAD, chain.head_ref == d.get("from_head_ref"),
              f"chain head {chain.head_ref} != promoted {d.get('from_head_ref')}")
    pol = [r for r in before if r.topic == T_POLICY]
    rep.check(K.POLICY_VERSION, bool(pol) and pol[-1].artifact.get("policy_digest") == d.get("policy_digest"),
              "promotion names a policy other than the one recorded")
    _target_ref(rep, repo, d, chain.head_ref)
    _replay(rep, repo, before, chain.included, chain.base_ref, ledger, run_id)
    _validation_inputs(rep, repo, before, chain.base_ref)
    if chain.head_ref and chain.base_ref:
        _rehash_new_objects(rep, repo, chain.base_ref, chain.head_ref)
    return rep


def _without_decision(rep: VerifyReport, records: list[Record], keyring: Keyring) -> None:
    """A run with no promotion decision: held at the human gate (a signed gate that
    misses only consent, then a consent request), or ended before integration
    (tasks failed, or nothing to integrate); anything else lacks its decision."""
    gates = [r for r in records if r.topic == T_GATE]
    asked = [r for r in records if r.topic == T_CONSENT_REQ]
    if gates and asked and asked[-1].sequence > gates[-1].sequence:
        rep.outcome = "awaiting_consent"
        gate = gates[-1].artifact
        try:
            verify_artifact(gate, keyring)
        except SignatureError as exc:
            rep.add(failed(K.BLOCK_AGREES, f"gate decision: {exc.code}: {exc.message}"))
            return
        bad = [link for link in gate.get("links", []) if link.get("status") != "ok"]
        only_consent = bool(bad) and all(link.get("link") == "consent" and link.get("status") == "missing"
                                         for link in bad)
        rep.blocked_by = [str(m) for m in gate.get("missing", [])]
        rep.check(K.BLOCK_AGREES, only_consent and not gate.get("passed"),
                  "a consent request follows a gate that misses more than consent: "
                  + "; ".join(rep.blocked_by))
        return
    if not gates and rep.run_status in ("failed", "cancelled", "completed"):
        return  # integration never ran: there is nothing to promote, and no decision to check
    rep.add(missing(K.PROMOTION_DECISION, "no promotion decision"))


def _block_agrees(rep: VerifyReport, repo: Path, before: list[Record], d: Mapping[str, Any],
                  chain: ChainResult) -> None:
    """A blocked decision is a valid outcome when its reasons are exactly the recorded
    gate's missing links, which are the links the re-evaluated chain misses, plus a
    target that could not take the head (one that moved away from the base is
    re-checked with git; one checked out in a worktree is taken as recorded)."""
    recorded = [str(m) for m in d.get("missing", [])]
    rep.blocked_by = recorded
    gates = [r for r in before if r.topic == T_GATE]
    if not gates:
        rep.add(missing(K.BLOCK_AGREES, "the blocked decision has no gate decision before it"))
        return
    gate_missing = [str(m) for m in gates[-1].artifact.get("missing", [])]
    target = [m for m in recorded if m.startswith(f"target:{d.get('to_ref')}: invalid ")]
    problems = []
    if not recorded:
        problems.append("the decision is blocked and names no reason")
    if sorted(set(recorded) - set(target)) != sorted(set(gate_missing)):
        problems.append(f"the decision names {sorted(set(recorded) - set(target))}, "
                        f"the gate named {sorted(set(gate_missing))}")
    if sorted(set(chain.missing)) != sorted(set(gate_missing)):
        problems.append(f"the re-evaluated chain misses {sorted(set(chain.missing))}, "
                        f"the gate named {sorted(set(gate_missing))}")
    for m in target:
        prev, head = d.get("previous_target"), chain.head_ref
        if m.endswith(TARGET_MOVED):
            if not (isinstance(prev, str) and head and gitio.ref_target(repo, prev + "^{commit}") is not None
                    and not gitio.is_ancestor(repo, prev, head)):
                problems.append(f"{m}: the recorded previous target {prev} does not show it")
        elif TARGET_CHECKED_OUT not in m:
            problems.append(f"{m}: not a reason dome records")
    rep.check(K.BLOCK_AGREES, not problems, "; ".join(problems))


def _chain_links(rep: VerifyReport, chain: ChainResult) -> None:
    """The re-evaluated chain: one check per link that is not ok (its name the subject)."""
    bad = [link for link in chain.links if link.status != "ok"]
    for link in bad:
        make = missing if link.status == "missing" else failed
        rep.add(make(K.EVIDENCE_CHAIN, link.detail or link.status, link.link))
    if not bad:
        rep.check(K.EVIDENCE_CHAIN, chain.passed, "the chain includes no proposal or has no head")


def _lifecycle(rep: VerifyReport, events: list[EventRecord],
               keyring: Keyring) -> tuple[dict[str, Any] | None, int | None, int | None]:
    """A run the run loop started must have finished, and after `run.finished`
    every record must be signed (only the admin's `dome promote` writes then).
    A run driven by the integration API alone has neither lifecycle event."""
    started, first, last = exports.run_lifecycle(events)
    if started is not None or first is not None:
        if first is None:
            rep.add(missing(K.RUN_FINISHED, "the run has no run.finished: unfinished, crashed, "
                                            "or records were cut from the ledger's end"))
        else:
            rep.add(ok(K.RUN_FINISHED))
            fin = events[[e.sequence for e in events].index(last)].payload
            rep.run_status = str(fin.get("status"))
            rep.run_reason = str(fin["reason"]) if fin.get("reason") else None
            for r in exports.check_signed_after_finish(events, first, keyring):
                rep.add(r)
    return started, first, last


def _finish_lists(rep: VerifyReport, ledger: Ledger, events: list[EventRecord], last: int | None,
                  records: list[Record]) -> None:
    """run.finished's proposal lists (a blob named by digest) exist, are intact, match their
    counts, and include what the promotion decision before them included."""
    if last is None:
        return
    fin = next(e for e in events if e.sequence == last).payload
    if LISTS_REF not in fin:
        return  # a run from before the lists moved to the blob store: they are inline
    try:
        lists = finish_lists(ledger.blobs, fin)
    except (DomeError, ValueError) as exc:
        rep.add(failed(K.FINISH_LISTS, getattr(exc, "message", str(exc)), str(fin.get(LISTS_REF))))
        return
    promos = [r for r in records if r.topic == T_PROMOTION and r.sequence < last]
    if promos:
        want = sorted(promos[-1].artifact.get("included_proposals") or [])
        rep.check(K.FINISH_LISTS, sorted(lists["included_proposals"]) == want,
                  "run.finished's included proposals differ from the promotion decision's",
                  str(fin.get(LISTS_REF)))
    else:
        rep.add(ok(K.FINISH_LISTS))


def _finish_agrees(rep: VerifyReport, events: list[EventRecord], first: int | None, last: int | None,
                   promo: Record) -> None:
    """What run.finished reports must be what the promotion decision says."""
    if last is None:
        return
    fin = next(e for e in events if e.sequence == last).payload
    d = promo.artifact
    if fin.get("status") == "promoted":
        rep.check(K.FINISH_AGREES, d.get("outcome") == "promoted" and fin.get("head") == d.get("from_head_ref")
                  and promo.sequence < last,
                  f"run.finished says promoted at {fin.get('head')}, the decision says "
                  f"{d.get('outcome')} at {d.get('from_head_ref')}")
    elif d.get("outcome") == "promoted" and fin.get("status") == "failed" and promo.sequence < last:
        # the decision said promote and the ref could not be moved: the run failed, with the error
        rep.check(K.FINISH_AGREES, isinstance(fin.get("error"), Mapping) and bool(fin["error"].get("code")),
                  "run.finished says failed after a decision to promote, and names no error")
    elif d.get("outcome") == "promoted":
        # only `dome promote` (after run.finished, with consent) may promote a run that finished otherwise
        rep.check(K.FINISH_AGREES, first is not None and promo.sequence > first,
                  f"run.finished says {fin.get('status')}, yet a decision before it says promoted")


def _partial(rep: VerifyReport, events: list[EventRecord], records: list[Record], last: int | None,
             included: list[str]) -> None:
    """A run that integrated without some tasks (`if_tasks_fail: promote_rest`) must
    say so in run.finished and name exactly the tasks that did not succeed, the gate
    must name the same ones, and no included proposal may come from one of them."""
    if last is None:
        return
    from coordinator.runstate import fold
    fin = next(e for e in events if e.sequence == last).payload
    counts = fin.get("counts") or {}
    short = int(counts.get("failed") or 0) + int(counts.get("blocked") or 0)
    rows = fin.get("tasks_not_landed") if fin.get("partial") else None
    if not fin.get("partial"):
        if short and included:
            rep.add(failed(K.PARTIAL, f"{short} task(s) did not land, yet run.finished does not say the "
                                      "run is partial"))
        return
    rows = [dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []
    rep.tasks_not_landed = rows
    named = {str(r.get("node_id")) for r in rows}
    st = fold(events)
    wrong = sorted(n for n in named if st.node(n).succeeded)
    gates = [r for r in records if r.topic == "gate.computed"]
    gate_rows = gates[-1].artifact.get("tasks_not_landed") if gates else None
    verified = {str(r.artifact.get("proposal_id")): r.artifact.get("node_id") for r in records
                if r.topic == T_PROPOSAL}
    smuggled = sorted(p for p in included if verified.get(p.split(":split-")[0]) in named)
    rep.check(K.PARTIAL, len(named) == len(rows) == short and not wrong and gate_rows == rows and not smuggled,
              "; ".join(x for x in (
                  f"run.finished names {len(named)} task(s) not landed, its counts say {short}"
                  if not len(named) == len(rows) == short else "",
                  f"named as not landed yet succeeded: {', '.join(wrong)}" if wrong else "",
                  "the gate names other tasks not landed" if gate_rows != rows else "",
                  f"included proposals of tasks not landed: {', '.join(smuggled)}" if smuggled else "") if x))


def _target_ref(rep: VerifyReport, repo: Path, d: Mapping[str, Any], head: str | None) -> None:
    """A promoted decision's ref must contain its head (it moved, by compare-and-swap),
    unless the run then failed because the ref could not be moved (FINISH_AGREES
    holds that to a recorded error)."""
    if d.get("outcome") != "promoted" or rep.run_status == "failed":
        return
    target = gitio.ref_target(repo, str(d.get("to_ref")))
    if target is None:
        rep.add(missing(K.TARGET_REF, f"{d.get('to_ref')} does not exist", str(d.get("to_ref"))))
        return
    rep.check(K.TARGET_REF, head is not None and gitio.is_ancestor(repo, head, target),
              f"{d.get('to_ref')} at {target} does not contain the promoted head {head}", str(d.get("to_ref")))


def _exports(rep: VerifyReport, ledger: Ledger, run_id: str, events: list[EventRecord], records: list[Record],
             keyring: Keyring, *, started: dict[str, Any] | None, last_finish: int | None,
             ops_root: Path) -> None:
    rdir = run_dir(ops_root, run_id)
    run_loop = started is not None
    for r in exports.check_events(rdir, events, required_through=last_finish, run_loop=run_loop):
        rep.add(r)
    if run_loop and last_finish is not None:
        assert started is not None
        results, queue = exports.check_work_queue(rdir, started)
        for r in results:
            rep.add(r)
        upto = [e for e in events if e.sequence <= last_finish]
        for r in exports.check_tasks(rdir, upto, queue, run_id, ledger.blobs.get):
            rep.add(r)
    for r in exports.check_gate(rdir, records):
        rep.add(r)
    for r in exports.check_promotion(rdir, records, keyring):
        rep.add(r)


def _attested_blobs(rep: VerifyReport, ledger: Ledger, events: list[EventRecord], records: list[Record],
                    promo: Record | None) -> None:
    """Every blob the run's records and its in-toto subjects name is read back and re-hashed."""
    refs = events_blobs(events)
    if promo is not None:
        refs += statement_blobs(intoto_statements([r for r in records if r.sequence < promo.sequence],
                                                  promo.artifact))
    problems = check_blobs(refs, ledger.blobs.get)
    for p in problems:
        rep.add((missing if p.status == "missing" else failed)(K.BLOBS, p.describe(), p.ref.digest))
    if not problems:
        rep.add(ok(K.BLOBS))


def _validation_inputs(rep: VerifyReport, repo: Path, records: list[Record], base: str | None) -> None:
    """Each report that judged a head with the base's inputs: its inputs came from the run's base,
    and the tree it names is the head's tree with exactly those inputs put back (rebuilt here)."""
    from .gate import BASE_INPUTS
    from .validation_inputs import base_inputs_tree
    for r in records:
        a = r.artifact
        if r.topic != "integration.validation_report" or a.get("phase") != BASE_INPUTS:
            continue
        inp = a.get("inputs") if isinstance(a.get("inputs"), Mapping) else {}
        subject = f"{a.get('suite')}@{str(a.get('head_ref'))[:12]}"
        if inp.get("from") != base:
            rep.add(failed(K.VALIDATION_INPUTS, f"inputs from {inp.get('from')}, not the run's base {base}", subject))
            continue
        try:
            head_tree = gitio.tree_of(repo, str(a.get("head_ref")))
            tree, restored = base_inputs_tree(repo, str(head_tree), str(base), list(inp.get("globs", [])))
        except gitio.GitError as exc:
            rep.add(failed(K.VALIDATION_INPUTS, f"{exc.code}: {exc.message}", subject))
            continue
        rep.check(K.VALIDATION_INPUTS, (tree, restored) == (inp.get("tree"), inp.get("restored"))
                  and a.get("tree") == tree, "the judged tree is not the head with the base's inputs", subject)


def _rehash_new_objects(rep: VerifyReport, repo: Path, base: str, head: str) -> None:
    """Every object the run added (reachable from the head, not the base) must
    hash to its id: a changed commit, tree or blob file is caught here."""
    proc = gitio.git(repo, "rev-list", "--objects", head, f"^{base}", check=False)
    if proc.returncode != 0:
        rep.add(failed(K.GIT_OBJECTS, "cannot list the run's objects: "
                       + proc.stderr.decode("utf-8", "replace")[:300]))
        return
    oids = [line.split(" ", 1)[0] for line in proc.stdout.decode().splitlines() if line]
    bad: list[str] = []
    with gitio.ObjectReader(repo, verify=True) as reader:
        for oid in oids:
            try:
                reader.read(oid)
            except gitio.GitError as exc:
                bad.append(f"{oid}: {exc.code}")
    rep.check(K.GIT_OBJECTS, not bad, "; ".join(bad[:10]))


def _replay(rep: VerifyReport, repo: Path, records: list[Record], included: list[str],
            base: str | None, ledger: Ledger, run_id: str) -> None:
    """Re-digest every layer's diff and re-apply it: trees must match."""
    if not base or not included:
        return
    verified = {r.artifact.get("proposal_id"): r.artifact for r in records if r.topic == T_PROPOSAL}
    splits = {r.artifact.get("proposal_id_A"): r.artifact for r in records
              if r.topic == "integration.split_result"}
    applies: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r.topic == T_APPLY and r.artifact.get("applied"):
            applies[str(r.artifact["proposal_id"])] = r.artifact
    blobs = ledger.blobs
    from .policy import IntegrationPolicy
    recorded = [r.artifact.get("policy") for r in records if r.topic == "integration.policy"]
    policy = IntegrationPolicy.from_dict(recorded[-1]) if recorded and isinstance(recorded[-1], Mapping) else None
    try:
        canvas = Canvas(repo, base, run_id=f"verify-{run_id}", create_worktree=False, persist=False, policy=policy)
    except DomeError as exc:  # the base's own objects cannot be read: there is nothing to replay onto
        rep.add(failed(K.REPLAY, f"{exc.code}: {exc.message}", base))
        return
    canvas.reader.close()
    canvas.reader = gitio.ObjectReader(repo, verify=True)
    canvas.store.reader = canvas.reader
    claimed = {str(v.get("base_tree_hash")) for pid, v in verified.items()
               if pid in {p.split(":split-")[0] for p in included}
               and v.get("proposal_base_ref", base) == base}  # derived bases are rebuilt by finish
    rep.check(K.BASE_TREE, claimed <= {canvas.base_tree},
              f"base {base} has tree {canvas.base_tree}, proposals claim {sorted(claimed)}")
    try:
        groups: list[tuple[str, list[str]]] = []
        for pid in included:
            h = str(applies.get(pid, {}).get("head_ref", ""))
            if groups and groups[-1][0] == h:
                groups[-1][1].append(pid)
            else:
                groups.append((h, [pid]))
        for head, pids in groups:
            for pid in pids:
                root = pid.split(":split-")[0]
                v = verified.get(root)
                if v is None or not v.get("diff_blob"):
                    rep.add(missing(K.DIFF, "canonical diff not stored", pid))
                    return
                try:
                    raw = blobs.get(v["diff_blob"])
                except Exception as exc:  # noqa: BLE001
                    rep.add(missing(K.DIFF, f"diff blob unreadable: {exc}", pid))
                    return
                parsed = diffs.parse_diff(raw)
                want = v["diff_digest"]
                if ":split-" in pid:
                    s = splits.get(pid)
                    if s is None:
                        rep.add(missing(K.DIFF, "split result missing", pid))
                        return
                    if diffs.diff_digest(raw) != s.get("parent_diff_digest"):
                        rep.add(failed(K.DIFF, "parent diff digest differs", pid))
                        return
                    parsed = diffs.select(parsed, [(p, k) for p, k in s["keep_A"]])
                    raw = diffs.serialize_diff(parsed)
                    want = s["diff_digest_A"]
                if not rep.check(K.DIFF_DIGEST, digest_bytes(diffs.serialize_diff(parsed)) == want
                                 == applies.get(pid, {}).get("diff_digest"),
                                 "re-canonicalized diff digest differs", pid):
                    return
                att = canvas.try_apply(parsed)
                if not rep.check(K.REAPPLY, att.clean, "diff no longer applies to its parent"  # and why
                                 + "".join(f"; {c.path}: {c.reason}" for c in att.conflicts[:3]), pid):
                    return
                canvas.commit(att, [pid])
            tree = canvas.tree.write()
            got = gitio.commit_facts(canvas.reader, [head]).get(head, {})  # re-hashed read
            if not rep.check(K.TREE, got.get("tree") == tree,
                             "replayed tree differs from the checkpoint tree", head[:12]):
                return
    except (gitio.GitError, diffs.DiffError) as exc:
        rep.add(failed(K.REPLAY, f"{exc.code}: {exc.message}"))
    finally:
        canvas.close()
