"""The gate: the promotion evidence chain as a table of link rules (pure).

Each rule is one link of the chain: a code, a sentence saying what the link
proves, and a small check that reads the run's evidence records and adds its
links (`ok`, `missing`, `failing` or `invalid`) to the gate's state. The gate
is a fold of that state over `RULES`, in order: a rule that sees the chain
cannot go on (no signed stack plan) stops the fold. The promotion decision,
`dome promote` and `dome verify` all call `evaluate_chain`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from registry.errors import SignatureError
from registry.signing import Keyring

from .evidence import (T_APPLY, T_CONSENT, T_CONSENT_REQ, T_PLAN, T_POLICY, T_PROPOSAL, T_REQUIREMENTS,
                       T_VALIDATION, ChainResult, GitFacts, Link, Record, evidence_ref, policy_from_record,
                       verify_artifact)
from .policy import IntegrationPolicy, globs_matcher, risk_level


@dataclass
class GateState:
    """What the rules have found so far: the fold's accumulator."""

    by_topic: Mapping[str, list[Record]]
    keyring: Keyring
    facts: GitFacts
    run_id: str
    policy: IntegrationPolicy | None
    links: list[Link] = field(default_factory=list)
    refs: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    plan: Mapping[str, Any] | None = None
    base: str | None = None
    entries: list[Mapping[str, Any]] = field(default_factory=list)
    included: list[str] = field(default_factory=list)
    risks: set[str] = field(default_factory=set)
    touched: set[str] = field(default_factory=set)
    splits: int = 0
    applies: dict[str, Record] = field(default_factory=dict)
    head: str | None = None
    required: list[str] = field(default_factory=list)
    human: bool = False
    inputs_changed: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # proposal -> {paths, suites}

    def topic(self, topic: str) -> list[Record]:
        return self.by_topic.get(topic, [])

    def add(self, link: str, status: str, detail: str = "", *evidence: Record) -> None:
        """Add a link; the records that prove an `ok` link become evidence refs too."""
        refs = [evidence_ref(r) for r in evidence]
        self.links.append(Link(link, status, detail, refs))
        if status == "ok":
            self.refs.extend(refs)

    def signed(self, rec: Record, name: str) -> bool:
        """Whether `rec` carries a valid signature and belongs to this run (else its link is added)."""
        try:
            verify_artifact(rec.artifact, self.keyring)
        except SignatureError as exc:
            self.add(f"signature:{name}", "invalid", f"{exc.code}: {exc.message}")
            return False
        if rec.artifact.get("run_id") not in (None, self.run_id):
            self.add(f"binding:{name}", "invalid", "artifact belongs to another run")
            return False
        return True

    @property
    def in_force(self) -> IntegrationPolicy:
        return self.policy or IntegrationPolicy()


@dataclass(frozen=True)
class LinkRule:
    """One link of the chain: its code, what it proves, and its check."""

    code: str
    explanation: str
    check: Callable[[GateState], None]
    kinds: tuple[str, ...] = ()  # the link kinds (name before ':') it adds besides `code`

    def adds(self, link: str) -> bool:
        return link.split(":")[0] in (self.code, *self.kinds)


SHARED_KINDS = ("signature", "binding")  # any rule adds these for a record that fails its signature or run


def check_policy(st: GateState) -> None:
    recs = [r for r in st.topic(T_POLICY) if st.signed(r, "policy")]
    if recs:
        st.refs.append(evidence_ref(recs[-1]))
    if st.policy is None:
        if recs:
            st.policy = policy_from_record(recs[-1].artifact)
            if st.policy.digest != recs[-1].artifact.get("policy_digest"):  # signed, but not what it names
                st.add("policy", "invalid", "the recorded policy differs from the digest it records")
        else:
            st.add("policy", "missing", "no signed policy record")
            st.policy = IntegrationPolicy()
    elif recs and recs[-1].artifact.get("policy_digest") != st.policy.digest:
        st.add("policy", "invalid", "recorded policy differs from the policy in force")


def check_stack_plan(st: GateState) -> None:
    plans = st.topic(T_PLAN)
    if not plans:
        st.add("stack_plan", "missing")
        st.stopped = True
        return
    rec = max(plans, key=lambda r: (int(r.artifact.get("revision", 1)), r.sequence))
    if not st.signed(rec, "stack_plan"):
        st.stopped = True
        return
    st.add("stack_plan", "ok", "", rec)
    st.plan = rec.artifact
    st.base = str(rec.artifact["base_ref"])
    st.entries = list(rec.artifact.get("ordered_proposals", []))
    st.included = [str(e["proposal_id"]) for e in st.entries]


def check_proposals(st: GateState) -> None:
    verified = {str(r.artifact.get("proposal_id")): r for r in st.topic(T_PROPOSAL)}
    for e in st.entries:
        pid = str(e["proposal_id"])
        root, split = pid.split(":split-")[0], ":split-" in pid
        st.splits += split
        rec = verified.get(root)
        if rec is None:
            st.add(f"proposal:{pid}", "missing", "no verified proposal record")
            continue
        if not st.signed(rec, f"proposal:{root}"):
            continue
        st.risks.add(risk_level(rec.artifact.get("risk")))
        st.touched.update(rec.artifact.get("touched_files", []))
        if isinstance(rec.artifact.get("validation_inputs_changed"), Mapping):
            st.inputs_changed[root] = rec.artifact["validation_inputs_changed"]
        if not split and rec.artifact.get("diff_digest") != e.get("diff_digest"):
            st.add(f"proposal:{pid}", "invalid", "plan digest differs from the verified proposal")
        st.refs.append(evidence_ref(rec))


def _checkpoint_faults(a: Mapping[str, Any], info: Mapping[str, Any], pid: str, prev: str) -> list[str]:
    """What is wrong with the commit an ApplyResult names (empty when nothing)."""
    faults = []
    if a.get("head_tree_hash") and info.get("tree") != a.get("head_tree_hash"):
        faults.append("checkpoint tree differs from the ApplyResult")
    if a.get("head_ref") != prev and prev not in info.get("parents", []):
        faults.append("checkpoint does not descend from the previous layer")
    trailers = info.get("trailers_all", {})
    if pid not in trailers.get("Dome-Proposal", []) or \
            f"{pid} {a.get('diff_digest')}" not in trailers.get("Dome-Diff-Digest", []):
        faults.append("commit trailers do not name this proposal")
    return faults


def _apply_fault(st: GateState, e: Mapping[str, Any], pid: str, rec: Record | None) -> str | None:
    """Why layer `pid` has no usable ApplyResult (its link added), or None when it has one."""
    if rec is None:
        st.add(f"apply_result:{pid}", "missing")
        return "missing"
    if not st.signed(rec, f"apply_result:{pid}"):
        return "unsigned"
    for fault, bad in (("diff digest differs from the plan", rec.artifact.get("diff_digest") != e.get("diff_digest")),
                       ("applied on another base", rec.artifact.get("base_ref") != st.base)):
        if bad:
            st.add(f"apply_result:{pid}", "invalid", fault)
            return fault
    commit = str(rec.artifact.get("head_ref"))
    if st.facts.commits.get(commit) is None:
        st.add(f"checkpoint:{pid}", "missing", f"commit {commit} not in the repository")
        return "no commit"
    return None


def check_apply_results(st: GateState) -> None:
    for r in st.topic(T_APPLY):
        if r.artifact.get("applied"):
            st.applies[str(r.artifact.get("proposal_id"))] = r  # later results supersede (re-applies)
    prev, chain_ok = str(st.base), True
    for e in st.entries:
        pid = str(e["proposal_id"])
        rec = st.applies.get(pid)
        if _apply_fault(st, e, pid, rec) is not None:
            chain_ok = False
            continue
        assert rec is not None
        commit = str(rec.artifact.get("head_ref"))
        for fault in _checkpoint_faults(rec.artifact, st.facts.commits[commit], pid, prev):
            st.add(f"checkpoint:{pid}", "invalid", fault)
            chain_ok = False
        prev = st.head = commit
        st.add(f"apply_result:{pid}", "ok", "", rec)
    if st.head is None and not st.entries:
        st.head = st.base
    if not st.entries:
        st.add("apply_results", "missing", "the plan includes no proposal")
    if chain_ok and st.entries:
        st.add("checkpoint_ancestry", "ok")


def check_requirements(st: GateState) -> None:
    recs = [r for r in st.topic(T_REQUIREMENTS) if st.signed(r, "requirements")]
    listed = sorted(recs[-1].artifact.get("required_suites", [])) if recs else []
    if recs:
        st.refs.append(evidence_ref(recs[-1]))
    else:
        st.add("requirements", "missing", "no signed list of required suites")
    required = set(st.in_force.required_suites(st.risks)) | set(listed)
    if st.splits:
        required |= set(st.in_force.escalate_on_split)
    st.required = sorted(required)


def _at_head(st: GateState, suite: str, mine: list[Record]) -> tuple[str, Record] | None:
    """The newest signed report of `suite` on the head with exactly the included proposals."""
    at_head = [r for r in mine if r.artifact.get("head_ref") == st.head
               and sorted(r.artifact.get("included_proposals", [])) == sorted(st.included)]
    for r in reversed(at_head):
        if st.signed(r, f"validation:{suite}"):
            return ("ok" if r.artifact.get("passed") is True else "failing"), r
    return None


def _per_layer(st: GateState, suite: str, mine: list[Record]) -> list[Record] | None:
    """A signed passing report on every layer, where the policy lets those count."""
    layers = [str(st.applies[p].artifact["head_ref"]) for p in st.included if p in st.applies]
    if st.in_force.validation_counts != "per_layer_or_final" or not layers:
        return None
    found = {r.artifact["head_ref"]: r for r in mine
             if r.artifact.get("passed") is True and r.artifact.get("head_ref") in layers}
    if all(c in found for c in layers) and all(st.signed(found[c], f"validation:{suite}") for c in layers):
        return [found[c] for c in layers]
    return None


BASE_INPUTS = "base_inputs"
"""The phase of a report that judged the head with the base's suite inputs put back."""


def check_validations(st: GateState) -> None:
    reports = [r for r in st.topic(T_VALIDATION) if r.artifact.get("phase") != BASE_INPUTS]
    for suite in st.required:
        mine = [r for r in reports if r.artifact.get("suite") == suite]
        found = _at_head(st, suite, mine)
        if found is not None and found[0] == "ok":
            st.add(f"validation:{suite}", "ok", "", found[1])
            continue
        if found is not None:
            st.add(f"validation:{suite}", "failing", "failed on the head", found[1])
            continue
        layers = _per_layer(st, suite, mine)
        if layers is not None:
            st.add(f"validation:{suite}", "ok", "per-layer reports")
            st.refs.extend(evidence_ref(r) for r in layers)
            continue
        st.add(f"validation:{suite}", "missing", "no report bound to the head")


def check_validation_inputs(st: GateState) -> None:
    """A head whose proposals changed a required suite's inputs was judged by that suite with the
    base's inputs as well: a signed report bound to the head names the inputs it put back. Its
    result is for the person who consents (the change needs consent), not a verdict here."""
    suites = sorted({str(s) for c in st.inputs_changed.values() for s in c.get("suites", [])
                     if s in st.required})
    reports = [r for r in st.topic(T_VALIDATION) if r.artifact.get("phase") == BASE_INPUTS]
    for suite in suites:
        found = _at_head(st, suite, [r for r in reports if r.artifact.get("suite") == suite])
        if found is None:
            st.add(f"validation_inputs:{suite}", "missing", "no report of the suite with the base's inputs")
        else:
            st.add(f"validation_inputs:{suite}", "ok", "", found[1])


def check_consent(st: GateState) -> None:
    pol = st.in_force
    gated = globs_matcher(tuple(pol.human_gate_paths))
    st.human = bool(st.risks & set(pol.human_gate_risk)) or any(map(gated, st.touched)) or bool(
        pol.protected_touched(st.touched)) or bool(  # protected paths need a person whatever the risk settings
        st.inputs_changed)  # and so do changed suite inputs
    if not st.human:
        return
    consents = [r for r in st.topic(T_CONSENT) if r.artifact.get("head_ref") == st.head and st.signed(r, "consent")]
    requested = {str(r.artifact.get("consent_id")): r for r in st.topic(T_CONSENT_REQ)
                 if st.signed(r, "consent_request")}
    ok = [c for c in consents if str(c.artifact.get("consent_id")) in requested
          and requested[str(c.artifact["consent_id"])].artifact.get("token_digest") == c.artifact.get("token_digest")]
    if ok:
        st.add("consent", "ok", "", ok[0])
    else:
        st.add("consent", "missing", "human approval required by policy")


RULES: tuple[LinkRule, ...] = (
    LinkRule("policy", "the run recorded a signed integration policy, and it is the policy in force", check_policy),
    LinkRule("stack_plan", "a signed stack plan names the base and the ordered proposals (without it the "
             "chain stops)", check_stack_plan),
    LinkRule("proposal", "every proposal in the plan was verified, signed, and has the diff the plan names",
             check_proposals),
    LinkRule("apply_result", "every layer has a signed ApplyResult on the plan's base whose checkpoint commit "
             "exists, has the recorded tree, descends from the layer before and names the proposal in its "
             "trailers", check_apply_results, ("checkpoint", "checkpoint_ancestry", "apply_results")),
    LinkRule("requirements", "the run recorded a signed list of the suites its queue requires", check_requirements),
    LinkRule("validation", "each required suite (policy by risk, the queue's list, the split escalation) passed "
             "on the head, or on every layer where the policy lets per-layer reports count", check_validations),
    LinkRule("validation_inputs", "where a proposal changed a required suite's inputs, that suite also judged "
             "the head with the base's inputs, in a signed report naming them", check_validation_inputs),
    LinkRule("consent", "a person approved this head when the risk or the paths touched ask for one",
             check_consent),
)


def rule_for(link: str) -> LinkRule | None:
    """The rule that adds a link of this name (None for the shared signature and binding links)."""
    return next((r for r in RULES if r.adds(link)), None)


def fold(st: GateState, rules: Sequence[LinkRule] = RULES) -> GateState:
    """Run the rules in order over the state; a rule may stop the chain."""
    for rule in rules:
        rule.check(st)
        if st.stopped:
            break
    return st


def evaluate_chain(records: Sequence[Record], *, keyring: Keyring, facts: GitFacts,
                   run_id: str, policy: IntegrationPolicy | None = None) -> ChainResult:
    """Every link of the promotion evidence chain, with its status (pure)."""
    by_topic: dict[str, list[Record]] = {}
    for r in sorted(records, key=lambda r: r.sequence):
        by_topic.setdefault(r.topic, []).append(r)
    st = fold(GateState(by_topic, keyring, facts, run_id, policy))
    if st.stopped:
        return ChainResult(False, st.links, None, None, [], [], False, st.refs, None)
    assert st.plan is not None
    passed = bool(st.entries) and st.head is not None and all(l.status == "ok" for l in st.links)
    return ChainResult(passed, st.links, st.head, st.base, st.included, st.required, st.human, st.refs,
                       str(st.plan.get("stack_plan_id")))
