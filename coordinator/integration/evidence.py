"""Evidence: signing artifacts, and evaluating the evidence chain (pure).

Every integration artifact is signed on its own (independently of the
ledger record that carries it), so the chain can be checked from the
artifacts alone and exported as DSSE envelopes:

    body      = the artifact without payload_digest, canonicalization, kid, signature
    payload_digest = sha256 of RFC 8785 canonical JSON of body
    signature = Ed25519 over DSSE PAE(PAYLOAD_TYPE, canonical body)

`evaluate_chain` is the gate: given the run's evidence records, the policy,
a keyring and git facts, it names every link that is present, missing,
failing or invalid. The promotion decision, `dome promote` and `dome
verify` all call it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from registry.canonical import CANONICALIZATION, canonical_json, digest_json
from registry.errors import SignatureError
from registry.signing import Keyring, SigningKey, b64d, b64e

from .policy import IntegrationPolicy, path_matches, risk_level

PAYLOAD_TYPE = "application/vnd.dome.artifact+json"
SIG_FIELDS = ("payload_digest", "canonicalization", "kid", "signature")

T_POLICY = "integration.policy"
T_PROPOSAL = "integration.proposal_verified"
T_REJECTED = "integration.proposal_rejected"
T_PLAN = "integration.stack_plan"
T_SELECTION = "integration.selection_decision"
T_APPLY = "integration.apply_result"
T_CHECKPOINT = "integration.checkpoint"
T_VALIDATION = "integration.validation_report"
T_REQUIREMENTS = "integration.requirements"
T_GATE = "gate.computed"
T_CONSENT_REQ = "promotion.consent_requested"
T_CONSENT = "promotion.consent_granted"
T_PROMOTION = "promotion.computed"


def body_of(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in artifact.items() if k not in SIG_FIELDS}


def sign_artifact(artifact: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    body = body_of(artifact)
    raw = canonical_json(body)
    return {**body, "payload_digest": digest_json(body), "canonicalization": CANONICALIZATION,
            "kid": key.kid, "signature": b64e(key.sign_pae(PAYLOAD_TYPE, raw))}


def verify_artifact(artifact: Mapping[str, Any], keyring: Keyring) -> str:
    """Check digest and signature; return the kid. Raises SignatureError."""
    for f in ("payload_digest", "kid", "signature"):
        if not isinstance(artifact.get(f), str):
            raise SignatureError(f"artifact has no {f}", code="EVIDENCE_UNSIGNED",
                                 details={"field": f})
    body = body_of(artifact)
    if digest_json(body) != artifact["payload_digest"]:
        raise SignatureError("artifact digest does not match its body", code="EVIDENCE_DIGEST_MISMATCH",
                             details={"claimed": artifact["payload_digest"]})
    key = keyring.get(str(artifact["kid"]))
    key.verify_pae(PAYLOAD_TYPE, canonical_json(body), b64d(str(artifact["signature"])))
    return key.kid


INTOTO_STATEMENT = "https://in-toto.io/Statement/v1"
INTOTO_PAYLOAD = "application/vnd.in-toto+json"


@dataclass(frozen=True)
class Record:
    sequence: int
    topic: str
    artifact: Mapping[str, Any]

    @classmethod
    def from_event(cls, ev: Any) -> "Record":
        get = (lambda k: ev[k]) if isinstance(ev, Mapping) else (lambda k: getattr(ev, k))
        return cls(int(get("sequence")), str(get("topic")), get("payload"))


@dataclass(frozen=True)
class GitFacts:
    """What the shell read from git for the commits the evidence names."""

    commits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # sha -> {tree, parents, trailers}
    ref_targets: Mapping[str, str | None] = field(default_factory=dict)
    ancestors_ok: Mapping[tuple[str, str], bool] = field(default_factory=dict)  # (anc, desc) -> bool


@dataclass
class Link:
    link: str
    status: str  # ok | missing | failing | invalid
    detail: str = ""
    refs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"link": self.link, "status": self.status, "detail": self.detail,
                "refs": self.refs}


@dataclass
class ChainResult:
    passed: bool
    links: list[Link]
    head_ref: str | None
    base_ref: str | None
    included: list[str]
    required_suites: list[str]
    human_gate: bool
    evidence_refs: list[dict[str, Any]]
    stack_plan_id: str | None

    @property
    def missing(self) -> list[str]:
        return [f"{l.link}: {l.status}" + (f" ({l.detail})" if l.detail else "")
                for l in self.links if l.status != "ok"]

    @property
    def only_consent_missing(self) -> bool:
        bad = [l for l in self.links if l.status != "ok"]
        return bool(bad) and all(l.link == "consent" and l.status == "missing" for l in bad)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "head_ref": self.head_ref, "base_ref": self.base_ref,
                "included_proposals": self.included, "required_suites": self.required_suites,
                "human_gate": self.human_gate, "links": [l.to_dict() for l in self.links],
                "missing": self.missing, "evidence_refs": self.evidence_refs,
                "stack_plan_id": self.stack_plan_id}


def policy_from_record(artifact: Mapping[str, Any]) -> IntegrationPolicy:
    """The IntegrationPolicy a run recorded (its `integration.policy` artifact)."""
    return IntegrationPolicy(**{k: (tuple(v) if isinstance(v, list) else
                                    ({kk: tuple(vv) for kk, vv in v.items()} if isinstance(v, dict) else v))
                                for k, v in artifact["policy"].items()})


def _ref(rec: Record) -> dict[str, Any]:
    a = rec.artifact
    oid = (a.get("object_id") or a.get("stack_plan_id") or a.get("report_id")
           or a.get("decision_id") or a.get("proposal_id") or a.get("checkpoint_id") or "")
    return {"kind": a.get("artifact_kind", "dome.unknown/v1"), "object_id": str(oid),
            "digest": a.get("payload_digest") or digest_json(body_of(a)),
            "event_sequence": rec.sequence}


def evaluate_chain(records: Sequence[Record], *, keyring: Keyring, facts: GitFacts,
                   run_id: str, policy: IntegrationPolicy | None = None) -> ChainResult:
    """Every link of the promotion evidence chain, with its status (pure)."""
    links: list[Link] = []
    refs: list[dict[str, Any]] = []

    def signed(rec: Record, name: str) -> bool:
        try:
            verify_artifact(rec.artifact, keyring)
        except SignatureError as exc:
            links.append(Link(f"signature:{name}", "invalid", f"{exc.code}: {exc.message}"))
            return False
        if rec.artifact.get("run_id") not in (None, run_id):
            links.append(Link(f"binding:{name}", "invalid", "artifact belongs to another run"))
            return False
        return True

    by_topic: dict[str, list[Record]] = {}
    for r in sorted(records, key=lambda r: r.sequence):
        by_topic.setdefault(r.topic, []).append(r)

    # -- policy -----------------------------------------------------------------
    pol_recs = [r for r in by_topic.get(T_POLICY, []) if signed(r, "policy")]
    if policy is None:
        if pol_recs:
            policy = policy_from_record(pol_recs[-1].artifact)
            refs.append(_ref(pol_recs[-1]))
        else:
            links.append(Link("policy", "missing", "no signed policy record"))
            policy = IntegrationPolicy()
    elif pol_recs:
        refs.append(_ref(pol_recs[-1]))
        if pol_recs[-1].artifact.get("policy_digest") != policy.digest:
            links.append(Link("policy", "invalid", "recorded policy differs from the policy in force"))

    # -- stack plan -------------------------------------------------------------
    plans = [r for r in by_topic.get(T_PLAN, [])]
    plan_rec = max(plans, key=lambda r: (int(r.artifact.get("revision", 1)), r.sequence)) if plans else None
    if plan_rec is None:
        links.append(Link("stack_plan", "missing"))
        return ChainResult(False, links, None, None, [], [], False, refs, None)
    if not signed(plan_rec, "stack_plan"):
        return ChainResult(False, links, None, None, [], [], False, refs, None)
    plan = plan_rec.artifact
    links.append(Link("stack_plan", "ok", refs=[_ref(plan_rec)]))
    refs.append(_ref(plan_rec))
    base = str(plan["base_ref"])
    entries = list(plan.get("ordered_proposals", []))
    included = [str(e["proposal_id"]) for e in entries]

    # -- proposals (verified inputs) --------------------------------------------
    verified = {str(r.artifact.get("proposal_id")): r for r in by_topic.get(T_PROPOSAL, [])}
    risks: set[str] = set()
    touched: set[str] = set()
    splits = 0
    for e in entries:
        pid = str(e["proposal_id"])
        root = pid.split(":split-")[0]
        if ":split-" in pid:
            splits += 1
        vr = verified.get(root)
        if vr is None:
            links.append(Link(f"proposal:{pid}", "missing", "no verified proposal record"))
            continue
        if not signed(vr, f"proposal:{root}"):
            continue
        risks.add(risk_level(vr.artifact.get("risk")))
        touched.update(vr.artifact.get("touched_files", []))
        if ":split-" not in pid and vr.artifact.get("diff_digest") != e.get("diff_digest"):
            links.append(Link(f"proposal:{pid}", "invalid", "plan digest differs from the verified proposal"))
        refs.append(_ref(vr))

    # -- apply results and checkpoint ancestry ---------------------------------
    applies: dict[str, Record] = {}
    for r in by_topic.get(T_APPLY, []):
        if r.artifact.get("applied"):
            applies[str(r.artifact.get("proposal_id"))] = r  # later results supersede (re-applies)
    head: str | None = None
    prev_commit = base
    chain_ok = True
    for e in entries:
        pid = str(e["proposal_id"])
        rec = applies.get(pid)
        if rec is None:
            links.append(Link(f"apply_result:{pid}", "missing"))
            chain_ok = False
            continue
        if not signed(rec, f"apply_result:{pid}"):
            chain_ok = False
            continue
        a = rec.artifact
        if a.get("diff_digest") != e.get("diff_digest"):
            links.append(Link(f"apply_result:{pid}", "invalid", "diff digest differs from the plan"))
            chain_ok = False
            continue
        if a.get("base_ref") != base:
            links.append(Link(f"apply_result:{pid}", "invalid", "applied on another base"))
            chain_ok = False
            continue
        commit = str(a.get("head_ref"))
        info = facts.commits.get(commit)
        if info is None:
            links.append(Link(f"checkpoint:{pid}", "missing", f"commit {commit} not in the repository"))
            chain_ok = False
            continue
        if a.get("head_tree_hash") and info.get("tree") != a.get("head_tree_hash"):
            links.append(Link(f"checkpoint:{pid}", "invalid", "checkpoint tree differs from the ApplyResult"))
            chain_ok = False
        if commit != prev_commit and prev_commit not in info.get("parents", []):
            links.append(Link(f"checkpoint:{pid}", "invalid",
                              "checkpoint does not descend from the previous layer"))
            chain_ok = False
        trailers = info.get("trailers_all", {})
        if pid not in trailers.get("Dome-Proposal", []) or \
                f"{pid} {a.get('diff_digest')}" not in trailers.get("Dome-Diff-Digest", []):
            links.append(Link(f"checkpoint:{pid}", "invalid", "commit trailers do not name this proposal"))
            chain_ok = False
        prev_commit = commit
        head = commit
        links.append(Link(f"apply_result:{pid}", "ok", refs=[_ref(rec)]))
        refs.append(_ref(rec))
    if head is None:
        head = base if not entries else None
    if not entries:
        links.append(Link("apply_results", "missing", "the plan includes no proposal"))
    if chain_ok and entries:
        links.append(Link("checkpoint_ancestry", "ok"))

    # -- validations ------------------------------------------------------------
    req_recs = [r for r in by_topic.get(T_REQUIREMENTS, []) if signed(r, "requirements")]
    wq_required = sorted(req_recs[-1].artifact.get("required_suites", [])) if req_recs else []
    if req_recs:
        refs.append(_ref(req_recs[-1]))
    else:
        links.append(Link("requirements", "missing", "no signed list of required suites"))
    required = set(policy.required_suites(risks)) | set(wq_required)
    if splits:
        required |= set(policy.escalate_on_split)
    reports = [r for r in by_topic.get(T_VALIDATION, [])]
    checkpoints_in_stack = [str(applies[p].artifact["head_ref"]) for p in included if p in applies]
    for suite in sorted(required):
        mine = [r for r in reports if r.artifact.get("suite") == suite]
        at_head = [r for r in mine if r.artifact.get("head_ref") == head
                   and sorted(r.artifact.get("included_proposals", [])) == sorted(included)]
        good = None
        failing = None
        for r in reversed(at_head):
            if not signed(r, f"validation:{suite}"):
                continue
            if r.artifact.get("passed") is True:
                good = r
            else:
                failing = r
            break
        if good is not None:
            links.append(Link(f"validation:{suite}", "ok", refs=[_ref(good)]))
            refs.append(_ref(good))
            continue
        if failing is not None:
            links.append(Link(f"validation:{suite}", "failing", "failed on the head", [_ref(failing)]))
            continue
        if policy.validation_counts == "per_layer_or_final" and checkpoints_in_stack:
            per_layer = {}
            for r in mine:
                if r.artifact.get("passed") is True and r.artifact.get("head_ref") in checkpoints_in_stack:
                    per_layer[r.artifact["head_ref"]] = r
            if all(c in per_layer for c in checkpoints_in_stack) and all(
                    signed(per_layer[c], f"validation:{suite}") for c in checkpoints_in_stack):
                links.append(Link(f"validation:{suite}", "ok", "per-layer reports"))
                refs.extend(_ref(per_layer[c]) for c in checkpoints_in_stack)
                continue
        links.append(Link(f"validation:{suite}", "missing", "no report bound to the head"))

    # -- human gate -------------------------------------------------------------
    human = bool(risks & set(policy.human_gate_risk)) or any(
        path_matches(p, g) for p in touched for g in policy.human_gate_paths) or bool(
        policy.protected_touched(touched))  # protected paths need a person whatever the risk settings
    if human:
        consents = [r for r in by_topic.get(T_CONSENT, [])
                    if r.artifact.get("head_ref") == head and signed(r, "consent")]
        requested = {str(r.artifact.get("consent_id")): r for r in by_topic.get(T_CONSENT_REQ, [])
                     if signed(r, "consent_request")}
        ok = [c for c in consents if str(c.artifact.get("consent_id")) in requested
              and requested[str(c.artifact["consent_id"])].artifact.get("token_digest")
              == c.artifact.get("token_digest")]
        if ok:
            links.append(Link("consent", "ok", refs=[_ref(ok[0])]))
            refs.append(_ref(ok[0]))
        else:
            links.append(Link("consent", "missing", "human approval required by policy"))

    passed = bool(entries) and head is not None and all(l.status == "ok" for l in links)
    return ChainResult(passed, links, head, base, included, sorted(required), human, refs,
                       str(plan.get("stack_plan_id")))


def _subjects(a: Mapping[str, Any]) -> list[dict[str, Any]]:
    subs: list[dict[str, Any]] = []
    for k in ("from_head_ref", "head_ref", "commit"):
        v = a.get(k)
        if isinstance(v, str) and len(v) in (40, 64):
            subs.append({"name": f"git+commit:{v}", "digest": {"gitCommit": v}})
            break
    for d in a.get("artifact_digests", []) or []:
        subs.append({"name": f"artifact:{d}", "digest": {"sha256": d.split(":", 1)[1]}})
    if a.get("diff_digest"):
        subs.append({"name": f"diff:{a.get('proposal_id')}",
                     "digest": {"sha256": str(a["diff_digest"]).split(":", 1)[1]}})
    if not subs:
        subs.append({"name": f"dome:{a.get('artifact_kind')}:{a.get('object_id')}",
                     "digest": {"sha256": str(a.get("payload_digest", "sha256:" + "0" * 64)).split(":", 1)[1]}})
    return subs


def intoto_statements(records: Sequence[Record], decision: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The in-toto v1 Statements exported beside a promotion decision: one per
    evidence record the decision references (in ledger order), then the decision."""
    wanted = {r["event_sequence"] for r in decision.get("evidence_refs", [])}
    arts = [r.artifact for r in sorted(records, key=lambda r: r.sequence) if r.sequence in wanted] + [decision]
    return [{"_type": INTOTO_STATEMENT, "subject": _subjects(a),
             "predicateType": "https://dome.dev/attestations/"
                              + str(a.get("artifact_kind", "dome.unknown/v1")).split(".", 1)[1],
             "predicate": a} for a in arts]
