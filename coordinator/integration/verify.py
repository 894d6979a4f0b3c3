"""Offline re-check of a promoted run (`dome verify RUN_ID`).

Nothing is trusted from the run's own conclusions: the chain is evaluated
again from the ledger records, every git object read is re-hashed, every
layer's canonical diff is re-digested and re-applied to its parent
checkpoint (the resulting tree must equal the checkpoint's tree), the
target ref must contain the promoted head, and the ledger's own hash chain
and signatures are checked when the ledger offers it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from registry import diffs
from registry.canonical import digest_bytes, digest_json
from registry.errors import DomeError, SignatureError
from registry.signing import Keyring

from coordinator.canvas import Canvas

from . import gitio
from .evidence import (T_APPLY, T_PLAN, T_POLICY, T_PROMOTION, T_PROPOSAL, T_REQUIREMENTS,
                       GitFacts, Record, body_of, evaluate_chain, verify_artifact)
from .finish import records_of


@dataclass
class VerifyReport:
    run_id: str
    valid: bool = True
    reasons: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    head_ref: str | None = None
    to_ref: str | None = None

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append({"check": name, "ok": ok, "detail": detail})
        if not ok:
            self.valid = False
            self.reasons.append(f"{name}: {detail}" if detail else name)
        return ok

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "valid": self.valid, "reasons": self.reasons,
                "head_ref": self.head_ref, "to_ref": self.to_ref, "checks": self.checks}


def _ledger_chain_ok(ledger: Any, keyring: Keyring) -> tuple[bool | None, str]:
    fn = getattr(ledger, "verify", None)
    if fn is None:
        return None, "ledger offers no verify()"
    try:
        rep = fn(keyring)
    except DomeError as exc:
        return False, f"{exc.code}: {exc.message}"
    for attr in ("ok", "valid", "passed"):
        if hasattr(rep, attr):
            ok = bool(getattr(rep, attr))
            return ok, "" if ok else str(getattr(rep, "errors", getattr(rep, "problems", rep)))[:500]
    return bool(rep), ""


def verify_run(ledger: Any, run_id: str, keyring: Keyring, *, repo: Path | None = None) -> VerifyReport:
    rep = VerifyReport(run_id)
    ok, detail = _ledger_chain_ok(ledger, keyring)
    if ok is not None:
        rep.check("ledger_hash_chain", ok, detail)
    records = records_of(ledger, run_id)
    if not rep.check("run_exists", bool(records), "no events for this run"):
        return rep
    promos = [r for r in records if r.topic == T_PROMOTION]
    if not rep.check("promotion_decision", bool(promos), "no promotion decision"):
        return rep
    promo = promos[-1]
    try:
        verify_artifact(promo.artifact, keyring)
        rep.check("promotion_signature", True)
    except SignatureError as exc:
        rep.check("promotion_signature", False, f"{exc.code}: {exc.message}")
    d = promo.artifact
    rep.head_ref, rep.to_ref = d.get("from_head_ref"), d.get("to_ref")
    rep.check("promotion_outcome", d.get("outcome") == "promoted",
              f"outcome is {d.get('outcome')!r}: " + "; ".join(d.get("missing", [])))
    after = [r for r in records if r.topic == "run.finished" and r.sequence > promo.sequence]
    if after:  # the run's own word on the decision: promoted only once the ref really moved
        fin = after[-1].artifact
        rep.check("run_finished", fin.get("status") == "promoted",
                  f"the run ended {fin.get('status')!r}: {fin.get('reason')}")
    meta = [r for r in records if r.topic == T_REQUIREMENTS]
    repo = repo or (Path(meta[-1].artifact["repo"]) if meta else None)
    if not rep.check("repository", repo is not None and Path(repo).exists(), "repository not found"):
        return rep
    assert repo is not None
    before = [r for r in records if r.sequence < promo.sequence]
    bad_sigs = []
    for r in records:
        if r.topic.split(".")[0] in ("integration", "gate", "promotion"):
            try:
                verify_artifact(r.artifact, keyring)
            except SignatureError as exc:
                bad_sigs.append(f"#{r.sequence} {r.topic}: {exc.code}")
    rep.check("record_signatures", not bad_sigs, "; ".join(bad_sigs[:10]))

    # evidence references resolve to the records, digests equal
    by_seq = {r.sequence: r for r in records}
    for ref in d.get("evidence_refs", []):
        r = by_seq.get(int(ref.get("event_sequence", -1)))
        good = r is not None and digest_json(body_of(r.artifact)) == ref.get("digest") \
            and r.artifact.get("payload_digest") == ref.get("digest")
        rep.check(f"evidence_ref:{ref.get('kind')}:{ref.get('object_id')}", good,
                  "" if good else "referenced record missing or changed")

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
            rep.check("git_objects", False, f"{exc.code}: {exc.message}")
            return rep
    chain = evaluate_chain(before, keyring=keyring, facts=facts, run_id=run_id)
    rep.check("evidence_chain", chain.passed, "; ".join(chain.missing))
    rep.check("promoted_head", chain.head_ref == d.get("from_head_ref"),
              f"chain head {chain.head_ref} != promoted {d.get('from_head_ref')}")
    pol = [r for r in before if r.topic == T_POLICY]
    rep.check("policy_version", bool(pol) and pol[-1].artifact.get("policy_digest") == d.get("policy_digest"),
              "promotion names a policy other than the one recorded")
    target = gitio.ref_target(repo, str(d.get("to_ref")))
    rep.check("target_ref", target is not None and chain.head_ref is not None
              and gitio.is_ancestor(repo, chain.head_ref, target),
              f"{d.get('to_ref')} does not contain the promoted head")
    _replay(rep, repo, before, chain.included, chain.base_ref, ledger, run_id)
    if chain.head_ref and chain.base_ref:
        _rehash_new_objects(rep, repo, chain.base_ref, chain.head_ref)
    return rep


def _rehash_new_objects(rep: VerifyReport, repo: Path, base: str, head: str) -> None:
    """Every object the run added (reachable from the head, not the base) must
    hash to its id: a changed commit, tree or blob file is caught here."""
    proc = gitio.git(repo, "rev-list", "--objects", head, f"^{base}", check=False)
    if not rep.check("git_objects_listed", proc.returncode == 0,
                     proc.stderr.decode("utf-8", "replace")[:300]):
        return
    oids = [line.split(" ", 1)[0] for line in proc.stdout.decode().splitlines() if line]
    bad: list[str] = []
    with gitio.ObjectReader(repo, verify=True) as reader:
        for oid in oids:
            try:
                reader.read(oid)
            except gitio.GitError as exc:
                bad.append(f"{oid}: {exc.code}")
    rep.check("git_objects", not bad, "; ".join(bad[:10]))


def _replay(rep: VerifyReport, repo: Path, records: list[Record], included: list[str],
            base: str | None, ledger: Any, run_id: str) -> None:
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
    blobs = getattr(ledger, "blobs", None)
    canvas = Canvas(repo, base, run_id=f"verify-{run_id}", create_worktree=False, persist=False)
    canvas.reader.close()
    canvas.reader = gitio.ObjectReader(repo, verify=True)
    canvas.store.reader = canvas.reader
    claimed = {str(v.get("base_tree_hash")) for pid, v in verified.items()
               if pid in {p.split(":split-")[0] for p in included}
               and v.get("proposal_base_ref", base) == base}  # derived bases are rebuilt by finish
    rep.check("base_tree_hash", claimed <= {canvas.base_tree},
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
                if v is None or blobs is None or not v.get("diff_blob"):
                    rep.check(f"diff:{pid}", False, "canonical diff not stored")
                    return
                try:
                    raw = blobs.get(v["diff_blob"])
                except Exception as exc:  # noqa: BLE001
                    rep.check(f"diff:{pid}", False, f"diff blob unreadable: {exc}")
                    return
                parsed = diffs.parse_diff(raw)
                want = v["diff_digest"]
                if ":split-" in pid:
                    s = splits.get(pid)
                    if s is None:
                        rep.check(f"diff:{pid}", False, "split result missing")
                        return
                    if diffs.diff_digest(raw) != s.get("parent_diff_digest"):
                        rep.check(f"diff:{pid}", False, "parent diff digest differs")
                        return
                    parsed = diffs.select(parsed, [(p, k) for p, k in s["keep_A"]])
                    raw = diffs.serialize_diff(parsed)
                    want = s["diff_digest_A"]
                if not rep.check(f"diff_digest:{pid}", digest_bytes(diffs.serialize_diff(parsed)) == want
                                 == applies.get(pid, {}).get("diff_digest"),
                                 "re-canonicalized diff digest differs"):
                    return
                att = canvas.try_apply(parsed)
                if not rep.check(f"reapply:{pid}", att.clean, "diff no longer applies to its parent"):
                    return
                canvas.commit(att, [pid])
            tree = canvas.tree.write()
            got = gitio.commit_facts(canvas.reader, [head]).get(head, {})  # re-hashed read
            if not rep.check(f"tree:{head[:12]}", got.get("tree") == tree,
                             "replayed tree differs from the checkpoint tree"):
                return
    except (gitio.GitError, diffs.DiffError) as exc:
        rep.check("replay", False, f"{exc.code}: {exc.message}")
    finally:
        canvas.close()
