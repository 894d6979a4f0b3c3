"""finish_run end to end on a real repository, the gate, and the evidence
chain: promotion is refused when any single link is missing."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.integration.evidence import GitFacts, Record, sign_artifact
from coordinator.integration.gate import evaluate_chain
from coordinator.integration.finish import FinishContext, finish_run
from coordinator.integration.recorder import git_facts, records_of
from coordinator.integration.policy import IntegrationPolicy
from registry.signing import Keyring, SigningKey
from tests.conftest import git
from ledger import Ledger
from tests.integration.conftest import edit_line, head, make_proposal, tamper_record
from tests.integration.fakes import MemLedger

SUITE = {"suite": "command", "name": "unit", "argv": ["sh", "-c", "test ! -e BROKEN"]}


def _policy(**kw) -> IntegrationPolicy:
    base = dict(suites_by_risk={"low": ("unit",), "medium": ("unit",)}, human_gate_risk=("high",),
                promote_to="refs/heads/release")
    base.update(kw)
    return IntegrationPolicy(**base)


def _run(repo: Path, proposals, tmp_path: Path, policy=None, ledger=None, key=None, run_id="run-1",
         validations=(SUITE,)):
    ledger = ledger or MemLedger()
    key = key or SigningKey(b"\x01" * 32)
    ctx = FinishContext(run_id=run_id, repo=repo, base_ref=head(repo),
                        proposals=[p for p, _ in proposals], ledger=ledger, signing_key=key,
                        ops_root=tmp_path / "ops", validations=list(validations), policy=policy or _policy(),
                        diff_loader=lambda p: dict((q["proposal_id"], d) for q, d in proposals)[p["proposal_id"]],
                        seed=3)
    return finish_run(ctx), ledger, key


def test_clean_run_is_promoted_with_signed_evidence(big_repo: Path, tmp_path: Path) -> None:
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 7, f"e{k}")) for k in range(4)]
    res, ledger, key = _run(big_repo, props, tmp_path)
    assert res.status == "promoted", res.missing
    assert res.included == ["p0", "p1", "p2", "p3"]
    assert git(big_repo, "rev-parse", "refs/heads/release") == res.head_ref
    out = tmp_path / "ops" / "runs" / "run-1"
    assert (out / "gate" / "gate.decision.json").is_file()
    assert (out / "promotion" / "promotion.decision.json").is_file()
    lines = (out / "promotion" / "evidence.intoto.jsonl").read_text().splitlines()
    import base64
    import json
    stmts = [json.loads(base64.b64decode(json.loads(l)["payload"])) for l in lines]
    assert all(s["_type"] == "https://in-toto.io/Statement/v1" for s in stmts)
    assert stmts[-1]["subject"][0]["digest"] == {"gitCommit": res.head_ref}


def _release_ref_exists(repo: Path) -> bool:
    import subprocess
    return subprocess.run(["git", "rev-parse", "--verify", "-q", "refs/heads/release"], cwd=repo,
                          capture_output=True).returncode == 0


def test_missing_suite_blocks_naming_the_link(big_repo: Path, tmp_path: Path) -> None:
    """The policy requires a suite the queue never defines: the chain lacks that link."""
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"))]
    pol = _policy(suites_by_risk={"low": ("unit", "lint")})
    res, ledger, _ = _run(big_repo, props, tmp_path, policy=pol)
    assert res.status == "blocked"
    assert any(m.startswith("validation:lint: missing") for m in res.missing), res.missing
    assert not _release_ref_exists(big_repo)


def test_failing_suite_blocks_naming_the_link(big_repo: Path, tmp_path: Path) -> None:
    """A required suite that runs and fails on every stack: nothing is promoted, and the
    missing link names that suite."""
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"))]
    pol = _policy(suites_by_risk={"low": ("unit", "lint")})
    lint = {"suite": "command", "name": "lint", "argv": ["sh", "-c", "exit 1"]}
    res, ledger, _ = _run(big_repo, props, tmp_path, policy=pol, validations=(SUITE, lint))
    assert res.status == "blocked"
    assert "validation:lint: failing (failed on the head)" in res.missing, res.missing
    assert res.why_blocked["p0"]["failing_suites"] == ["lint"]
    assert not _release_ref_exists(big_repo)


def test_culprit_is_ejected_and_the_rest_promoted(big_repo: Path, tmp_path: Path) -> None:
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 7, f"e{k}")) for k in range(5)]
    props[2] = make_proposal(big_repo, "p2", lambda r: (r / "BROKEN").write_text("x\n"))
    res, ledger, _ = _run(big_repo, props, tmp_path)
    assert res.status == "promoted" and res.included == ["p0", "p1", "p3", "p4"]
    assert res.why_blocked["p2"]["state"] == "ejected"


def test_high_risk_waits_for_single_use_consent(big_repo: Path, tmp_path: Path) -> None:
    from coordinator.integration.consent import ConsentError, grant_consent
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"), risk={"class": "high"})]
    pol = _policy(suites_by_risk={"high": ("unit",)})
    res, ledger, key = _run(big_repo, props, tmp_path, policy=pol)
    assert res.status == "awaiting_consent" and res.consent_token
    assert res.missing == ["consent: missing (human approval required by policy)"]
    with pytest.raises(ConsentError) as exc:
        grant_consent(ledger, "run-1", "wrong-token", key=key, ops_root=tmp_path / "ops", policy=pol)
    assert exc.value.code == "CONSENT_INVALID"
    done = grant_consent(ledger, "run-1", res.consent_token, key=key, ops_root=tmp_path / "ops", policy=pol)
    assert done.status == "promoted"
    with pytest.raises(ConsentError) as exc:
        grant_consent(ledger, "run-1", res.consent_token, key=key, ops_root=tmp_path / "ops", policy=pol)
    assert exc.value.code == "CONSENT_ALREADY_USED"


# ---------------------------------------------------------------------------
# one test per link: remove it (or break its signature) and the gate refuses


@pytest.fixture(scope="module")
def promoted_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("chain")
    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for k in range(3):
        (repo / f"f{k}.txt").write_text("".join(f"{k}:{i}\n" for i in range(30)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    props = [make_proposal(repo, f"p{k}", edit_line(f"f{k}.txt", 10, "x")) for k in range(3)]
    res, ledger, key = _run(repo, props, tmp, policy=_policy(human_gate_risk=()))
    assert res.status == "promoted"
    records = [r for r in records_of(ledger, "run-1") if r.topic not in ("gate.computed", "promotion.computed")]
    return repo, records, key, res


def _evaluate(repo, records, key):
    keyring = Keyring({key.kid: key.public})
    return evaluate_chain(records, keyring=keyring, facts=git_facts(repo, records), run_id="run-1")


def _drop(records, pred):
    out = [r for r in records if not pred(r)]
    assert len(out) < len(records)
    return out


LINKS = {
    "stack_plan": lambda r: r.topic == "integration.stack_plan",
    "apply_result": lambda r: r.topic == "integration.apply_result" and r.artifact["proposal_id"] == "p1",
    "validation_report": lambda r: r.topic == "integration.validation_report",
    "verified_proposal": lambda r: r.topic == "integration.proposal_verified" and r.artifact["proposal_id"] == "p2",
    "policy_record": lambda r: r.topic == "integration.policy",
    "requirements_record": lambda r: r.topic == "integration.requirements",
}


@pytest.mark.parametrize("link", sorted(LINKS))
def test_promotion_refused_when_a_link_is_removed(promoted_run, link: str) -> None:
    repo, records, key, _ = promoted_run
    assert _evaluate(repo, records, key).passed
    result = _evaluate(repo, _drop(records, LINKS[link]), key)
    assert not result.passed and result.missing, link


SIGNED = ["integration.stack_plan", "integration.apply_result", "integration.validation_report",
          "integration.proposal_verified", "integration.policy", "integration.requirements"]


@pytest.mark.parametrize("topic", SIGNED)
def test_promotion_refused_when_a_signature_is_broken(promoted_run, topic: str) -> None:
    repo, records, key, _ = promoted_run
    victim = max(r.sequence for r in records if r.topic == topic)
    other = SigningKey(b"\x02" * 32)
    forged = [Record(r.sequence, r.topic, sign_artifact(r.artifact, other)) if r.sequence == victim
              else r for r in records]
    result = _evaluate(repo, forged, key)
    assert not result.passed
    assert any(m.startswith("signature:") for m in result.missing)


def test_promotion_refused_when_a_checkpoint_commit_is_missing(promoted_run) -> None:
    repo, records, key, _ = promoted_run
    keyring = Keyring({key.kid: key.public})
    facts = git_facts(repo, records)
    victim = next(r.artifact["head_ref"] for r in records if r.topic == "integration.apply_result")
    broken = GitFacts(commits={k: v for k, v in facts.commits.items() if k != victim})
    result = evaluate_chain(records, keyring=keyring, facts=broken, run_id="run-1")
    assert not result.passed and any(m.startswith("checkpoint:") for m in result.missing)


def test_promotion_refused_when_validation_is_bound_to_another_head(promoted_run) -> None:
    repo, records, key, _ = promoted_run
    moved = [Record(r.sequence, r.topic, sign_artifact({**r.artifact, "head_ref": "1" * 40}, key))
             if r.topic == "integration.validation_report" else r for r in records]
    assert not _evaluate(repo, moved, key).passed


# ---------------------------------------------------------------------------
# offline verification


def test_verify_accepts_a_promoted_run_and_rejects_tampering(big_repo: Path, tmp_path: Path) -> None:
    from coordinator.integration.verify import verify_run
    from coordinator.integration.verify import CheckKind
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 7, f"e{k}")) for k in range(3)]
    res, ledger, key = _run(big_repo, props, tmp_path, ledger=Ledger.open(None, tmp_path / "ops"))
    keyring = Keyring({key.kid: key.public})
    rep = verify_run(ledger, "run-1", keyring)
    assert rep.valid, rep.reasons()
    # the target ref moved back
    git(big_repo, "update-ref", "refs/heads/release", res.base_ref)
    bad = verify_run(ledger, "run-1", keyring)
    assert not bad.valid and bad.failed_kinds() == {CheckKind.TARGET_REF}
    git(big_repo, "update-ref", "refs/heads/release", res.head_ref)
    assert verify_run(ledger, "run-1", keyring).valid
    # a ledger record changed after promotion
    tamper_record(tmp_path / "ops", "run-1", "integration.apply_result",
                  lambda p: {**p, "applied": True, "diff_digest": "sha256:" + "0" * 64})
    assert not verify_run(ledger, "run-1", keyring).valid


def test_verify_replays_with_the_runs_recorded_policy(big_repo: Path, tmp_path: Path) -> None:
    """A run whose policy allows what the default refuses (the exec bit) is replayed by
    verify under that recorded policy, not the default one."""
    import os
    from coordinator.integration.verify import verify_run
    prop = make_proposal(big_repo, "px", lambda r: (edit_line("f01.txt", 7, "e")(r), os.chmod(r / "f01.txt", 0o755)))
    res, ledger, key = _run(big_repo, [prop], tmp_path, policy=_policy(allow_exec_bit=True),
                            ledger=Ledger.open(None, tmp_path / "ops"))
    try:
        assert res.status == "promoted" and res.included == ["px"], res.missing
        rep = verify_run(ledger, "run-1", Keyring({key.kid: key.public}))
        assert rep.valid, rep.reasons()
    finally:
        ledger.close()


def test_verify_replays_a_split_proposals_kept_half(big_repo: Path, tmp_path: Path) -> None:
    """A proposal split at integration is replayed from its parent's diff, cut as the
    signed split result says; the run verifies."""
    from coordinator.integration.verify import verify_run
    from tests.integration.test_stacking import _overlap_set
    res, ledger, key = _run(big_repo, _overlap_set(big_repo), tmp_path, ledger=Ledger.open(None, tmp_path / "ops"))
    try:
        assert "b:split-a" in res.included, (res.status, res.included, res.missing)
        rep = verify_run(ledger, "run-1", Keyring({key.kid: key.public}))
        assert rep.valid, rep.reasons()
    finally:
        ledger.close()


def _corrupt_loose(repo: Path, oid: str) -> None:
    import os
    import zlib
    import shutil
    import subprocess
    packs = repo / ".git" / "objects" / "pack"
    aside = repo.parent / "packs-aside"
    aside.mkdir(exist_ok=True)
    for pack in packs.glob("*.pack"):  # explode the canvas packs into loose objects
        shutil.move(str(pack), aside / pack.name)
        shutil.move(str(pack.with_suffix(".idx")), aside / pack.with_suffix(".idx").name)
        with open(aside / pack.name, "rb") as fh:
            subprocess.run(["git", "unpack-objects", "-q"], stdin=fh, cwd=repo, check=True)
    path = repo / ".git" / "objects" / oid[:2] / oid[2:]
    assert path.is_file()
    raw = zlib.decompress(path.read_bytes())
    os.chmod(path, 0o644)
    path.write_bytes(zlib.compress(raw.replace(b"e1", b"E1").replace(b"dome", b"DOME", 1)
                                   if b"e1" in raw or b"dome" in raw else raw + b"x"))


@pytest.fixture
def verified_run(big_repo: Path, tmp_path: Path):
    props = [make_proposal(big_repo, f"p{k}", edit_line(f"f{k:02d}.txt", 7, f"e{k}")) for k in range(3)]
    res, ledger, key = _run(big_repo, props, tmp_path, ledger=Ledger.open(None, tmp_path / "ops"))
    from coordinator.integration.verify import verify_run
    keyring = Keyring({key.kid: key.public})
    assert verify_run(ledger, "run-1", keyring).valid
    yield big_repo, res, ledger, keyring
    ledger.close()


@pytest.mark.parametrize("which", ["checkpoint_commit", "checkpoint_tree", "layer_blob"])
def test_verify_fails_when_a_git_object_is_changed(verified_run, which: str) -> None:
    from coordinator.integration.verify import verify_run
    repo, res, ledger, keyring = verified_run
    cp = next(e.payload for e in ledger.events("run-1") if e.topic == "integration.apply_result"
              and e.payload["proposal_id"] == "p1")
    if which == "checkpoint_commit":
        oid = cp["head_ref"]
    elif which == "checkpoint_tree":
        oid = cp["head_tree_hash"]
    else:
        oid = git(repo, "rev-parse", f"{cp['head_ref']}:f01.txt")
    _corrupt_loose(repo, oid)
    rep = verify_run(ledger, "run-1", keyring)
    assert not rep.valid, which
    assert rep.failures


@pytest.mark.parametrize("topic", ["integration.stack_plan", "integration.apply_result",
                                   "integration.validation_report", "integration.proposal_verified",
                                   "integration.checkpoint", "integration.policy",
                                   "promotion.computed"])
def test_verify_fails_when_a_ledger_record_is_changed(verified_run, topic: str) -> None:
    from coordinator.integration.verify import verify_run
    repo, res, ledger, keyring = verified_run
    from coordinator.integration.verify import CheckKind, Status
    tamper_record(ledger.ops_root, "run-1", topic, lambda p: {**p, "created_at": "2000-01-01T00:00:00Z"}, last=True)
    rep = verify_run(ledger, "run-1", keyring)
    assert not rep.valid, topic
    kinds = rep.failed_kinds()
    assert {CheckKind.LEDGER_CHAIN, CheckKind.RECORD_SIGNATURES} <= kinds, topic
    if topic == "integration.validation_report":  # the re-evaluated chain names the broken link
        assert (CheckKind.EVIDENCE_CHAIN, "signature:validation:unit", Status.FAILED) in {
            (f.kind, f.subject, f.status) for f in rep.failures}


def test_finish_is_idempotent_on_resume(big_repo: Path, tmp_path: Path) -> None:
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"))]
    res, ledger, key = _run(big_repo, props, tmp_path)
    n = len(ledger.events("run-1"))
    again, _, _ = _run(big_repo, props, tmp_path, ledger=ledger, key=key)
    assert again.status == res.status == "promoted" and again.head_ref == res.head_ref
    assert len(ledger.events("run-1")) == n  # nothing re-applied, re-signed or re-promoted


def test_task_risk_is_a_floor_the_worker_cannot_talk_down(big_repo: Path, tmp_path: Path) -> None:
    prop, diff = make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"), risk={"class": "low"},
                               node_id="n1")
    ledger = MemLedger()
    key = SigningKey(b"\x01" * 32)
    pol = _policy(suites_by_risk={"low": ("unit",), "high": ("unit",)})
    ctx = FinishContext(run_id="run-t", repo=big_repo, base_ref=head(big_repo), proposals=[prop],
                        ledger=ledger, signing_key=key, ops_root=tmp_path / "ops",
                        validations=[SUITE], policy=pol, diff_loader=lambda p: diff,
                        task_meta={"n1": {"risk": "high", "atomicity": "hunk_ok"}})
    res = finish_run(ctx)
    assert res.status == "awaiting_consent"  # the task says high: human gate
    verified = next(e.payload for e in ledger.events("run-t") if e.topic == "integration.proposal_verified")
    assert verified["risk"] == "high" and verified["atomicity"] == "hunk_ok"


def test_verify_writes_nothing_to_the_repository(verified_run) -> None:
    """The replay rebuilds every tree in memory: verifying leaves the repository's objects
    and refs exactly as they were (a check must not change what it checks)."""
    from coordinator.integration.verify import verify_run
    repo, _, ledger, keyring = verified_run

    def state() -> tuple[list[str], str]:
        files = sorted(str(p.relative_to(repo)) for p in (repo / ".git" / "objects").rglob("*") if p.is_file())
        return files, git(repo, "for-each-ref")

    git(repo, "repack", "-a", "-d", "-q")  # as a gc would: the run's own packs are gone, their objects kept
    before = state()
    assert verify_run(ledger, "run-1", keyring).valid
    assert state() == before


def test_verify_registers_no_worktree(verified_run) -> None:
    """The replay needs no checkout: verify never adds a worktree to the repository, not even
    for a moment. Here git could not register one (`.git/worktrees` is a plain file), and the
    run still verifies."""
    from coordinator.integration.verify import verify_run
    repo, _, ledger, keyring = verified_run
    (repo / ".git" / "worktrees").write_text("")
    rep = verify_run(ledger, "run-1", keyring)
    assert rep.valid, rep.reasons()


def test_the_replay_of_a_run_without_a_policy_record_uses_the_default_policy(verified_run) -> None:
    """A run that recorded no integration policy is replayed under the default one; the
    replay does not fail for want of the record."""
    from coordinator.integration.verify import _replay
    from coordinator.integration.verify_result import VerifyReport
    repo, res, ledger, _ = verified_run
    records = [r for r in records_of(ledger, "run-1") if r.topic != "integration.policy"]
    rep = VerifyReport("run-1")
    _replay(rep, repo, records, list(res.included), res.base_ref, ledger, "run-1")
    assert {c.kind.value for c in rep.checks} >= {"reapply", "tree"} and all(c.ok for c in rep.checks), rep.reasons()


def test_the_replay_names_a_proposal_whose_canonical_diff_was_not_stored(verified_run) -> None:
    """A verified proposal whose record names no stored diff cannot be replayed: the replay says
    the canonical diff was not stored, for that proposal, and stops."""
    from coordinator.integration.evidence import T_PROPOSAL, Record
    from coordinator.integration.verify import _replay
    from coordinator.integration.verify_result import VerifyReport
    repo, res, ledger, _ = verified_run
    records = [Record(r.sequence, r.topic, {k: v for k, v in r.artifact.items() if k != "diff_blob"})
               if r.topic == T_PROPOSAL and r.artifact.get("proposal_id") == "p0" else r
               for r in records_of(ledger, "run-1")]
    rep = VerifyReport("run-1")
    _replay(rep, repo, records, list(res.included), res.base_ref, ledger, "run-1")
    bad = [c for c in rep.checks if not c.ok]
    assert [(c.kind.value, c.detail, c.subject) for c in bad] == [("diff", "canonical diff not stored", "p0")], \
        rep.reasons()


def test_a_run_held_for_consent_has_its_blobs_checked_without_a_decision(big_repo: Path, tmp_path: Path) -> None:
    """A run with no promotion decision (held for consent) is verified too: it is reported as
    awaiting consent, every blob its records name is re-hashed, and a changed one is named."""
    import os
    from coordinator.integration.verify import CheckKind, verify_run
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"), risk={"class": "high"})]
    res, ledger, key = _run(big_repo, props, tmp_path, policy=_policy(suites_by_risk={"high": ("unit",)}),
                            ledger=Ledger.open(None, tmp_path / "ops"))
    try:
        assert res.status == "awaiting_consent"
        keyring = Keyring({key.kid: key.public})
        rep = verify_run(ledger, "run-1", keyring)
        assert rep.valid and rep.outcome == "awaiting_consent", rep.reasons()
        assert [c.ok for c in rep.checks if c.kind == CheckKind.BLOBS] == [True]
        digest = next(e.payload["diff_blob"] for e in ledger.events("run-1")
                      if e.topic == "integration.proposal_verified")
        path = ledger.blobs.path(digest)
        os.chmod(path, 0o644)
        path.write_bytes(path.read_bytes() + b" ")
        bad = verify_run(ledger, "run-1", keyring)
        assert [(f.kind, f.subject) for f in bad.failures] == [(CheckKind.BLOBS, digest)], bad.reasons()
    finally:
        ledger.close()


def test_the_replay_rebuilds_every_checkpoint_not_only_the_first(verified_run) -> None:
    """Each included proposal is re-applied and the tree of every checkpoint the run made is
    compared with the rebuilt one, in order: a replay that stopped after the first matching
    checkpoint would leave the later layers unchecked."""
    from coordinator.integration.verify import _replay
    from coordinator.integration.verify_result import VerifyReport
    repo, res, ledger, _ = verified_run
    applied = {e.payload["proposal_id"]: e.payload["head_ref"] for e in ledger.events("run-1")
               if e.topic == "integration.apply_result" and e.payload.get("applied")}
    want = [c for pid in res.included for c in (("reapply", pid), ("tree", applied[pid][:12]))]
    assert len(set(applied.values())) == len(res.included) == 3  # one checkpoint a proposal
    rep = VerifyReport("run-1")
    _replay(rep, repo, records_of(ledger, "run-1"), list(res.included), res.base_ref, ledger, "run-1")
    assert [(c.kind.value, c.subject) for c in rep.checks if c.kind.value in ("reapply", "tree")] == want
    assert all(c.ok for c in rep.checks), rep.reasons()


def test_a_chain_without_a_head_is_not_charged_a_git_objects_failure(big_repo: Path, tmp_path: Path) -> None:
    """The run's new objects (head, not base) are listed only when the re-evaluated chain has
    both: a run whose one apply result no longer says it applied has no head, and verify names
    what is wrong with the chain without a git-objects failure of its own making."""
    from coordinator.integration.verify import CheckKind, verify_run
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"))]
    res, ledger, key = _run(big_repo, props, tmp_path, ledger=Ledger.open(None, tmp_path / "ops"))
    try:
        assert res.status == "promoted"
        tamper_record(tmp_path / "ops", "run-1", "integration.apply_result", lambda p: {**p, "applied": False})
        rep = verify_run(ledger, "run-1", Keyring({key.kid: key.public}))
        kinds = rep.failed_kinds()
        assert {CheckKind.EVIDENCE_CHAIN, CheckKind.PROMOTED_HEAD} <= kinds, rep.reasons()
        assert [c for c in rep.checks if c.kind == CheckKind.GIT_OBJECTS] == [], rep.reasons()
    finally:
        ledger.close()


def test_the_replay_adds_no_check_without_a_base_or_without_proposals(verified_run) -> None:
    """With no base, or no proposal included, there is nothing to replay: no check is added
    (the chain's own checks say what is missing)."""
    from coordinator.integration.verify import _replay
    from coordinator.integration.verify_result import VerifyReport
    repo, res, ledger, _ = verified_run
    records = records_of(ledger, "run-1")
    for included, base in (([], res.base_ref), (list(res.included), None)):
        rep = VerifyReport("run-1")
        _replay(rep, repo, records, included, base, ledger, "run-1")
        assert rep.checks == [], (included, base, rep.reasons())


def test_a_blocked_run_is_verified_without_a_target_ref_check(big_repo: Path, tmp_path: Path) -> None:
    """A blocked decision moved no ref: its target is not checked (it need not exist), and
    the run verifies."""
    from coordinator.integration.verify import CheckKind, verify_run
    props = [make_proposal(big_repo, "p0", edit_line("f00.txt", 7, "x"))]
    res, ledger, key = _run(big_repo, props, tmp_path, policy=_policy(suites_by_risk={"low": ("unit", "lint")}),
                            ledger=Ledger.open(None, tmp_path / "ops"))
    try:
        assert res.status == "blocked" and not _release_ref_exists(big_repo)
        rep = verify_run(ledger, "run-1", Keyring({key.kid: key.public}))
        assert rep.valid and rep.outcome == "blocked", rep.reasons()
        assert CheckKind.TARGET_REF not in {c.kind for c in rep.checks}
    finally:
        ledger.close()
