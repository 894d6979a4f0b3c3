"""`dome verify` checks what dome hands to others: every file under
ops/runs/<run_id>/ is re-derived from the ledger and compared byte for byte,
a run-loop run must have `run.finished`, and nothing unsigned may follow it.

One real run (`dome run` of a gated task, then `dome promote`) is made per
module; each test tampers with its own copy of the ops folder."""
from __future__ import annotations

import base64
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from ledger import Ledger
from tests.conftest import dome_cli, gated_queue, git, make_repo
from tests.attacks import attack


@pytest.fixture(scope="module")
def promoted_run(tmp_path_factory):
    """(repo, ops, run_id): a low-risk run that `dome run` promoted itself (run.finished is its last record)."""
    tmp = tmp_path_factory.mktemp("verify-promoted")
    repo = make_repo(tmp / "repo")
    q = json.loads(gated_queue(tmp, repo, drc=False).read_text())
    q["tasks"][0]["risk"] = "low"
    qfile = tmp / "low.queue.json"
    qfile.write_text(json.dumps(q))
    run = dome_cli("run", str(qfile), "--ops-root", str(tmp / "ops"), "--json")
    out = json.loads(run.stdout)
    assert run.returncode == 0 and out["status"] == "promoted", run.stderr[-2000:]
    return repo, tmp / "ops", out["run_id"]


def _copy_ops(run: tuple[Path, Path, str], tmp_path: Path) -> tuple[Path, str, Path]:
    """(ops, run_id, run folder): a private copy of a module run's ops folder, for a test to tamper with."""
    _, ops, run_id = run
    mine = tmp_path / "ops"
    shutil.copytree(ops, mine)
    return mine, run_id, mine / "runs" / run_id


@pytest.fixture
def promoted_copy(promoted_run, tmp_path: Path):
    return _copy_ops(promoted_run, tmp_path)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """(repo, ops, run_id): a run held at the human gate, then promoted with consent."""
    tmp = tmp_path_factory.mktemp("verify-exports")
    repo = make_repo(tmp / "repo")
    ops = tmp / "ops"
    run = dome_cli("run", str(gated_queue(tmp, repo)), "--ops-root", str(ops), "--json")
    out = json.loads(run.stdout)
    assert out["status"] == "blocked" and out["awaiting_consent"], run.stderr[-2000:]
    token = (ops / "runs" / out["run_id"] / "gate" / "consent.token").read_text().strip()
    ok = dome_cli("promote", out["run_id"], "--consent", token, "--ops-root", str(ops), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    return repo, ops, out["run_id"]


@pytest.fixture
def run_copy(finished_run, tmp_path: Path):
    return _copy_ops(finished_run, tmp_path)


def _verify(ops: Path, run_id: str) -> tuple[int, dict]:
    proc = dome_cli("verify", run_id, "--ops-root", str(ops), "--json")
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _verify_here(ops: Path, run_id: str) -> dict:
    """verify_run in this process (what `dome verify --json` prints), without a CLI start-up."""
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    ledger = Ledger.open(None, ops)
    try:
        return verify_run(ledger, run_id, load_keyring(ops), ops_root=ops).to_dict()
    finally:
        ledger.close()


# every check an honest run that the run loop finished and promoted gets (none may silently go missing)
HONEST_CHECKS = {
    "ledger_hash_chain", "run_exists", "run_finished", "signed_after_finish", "run_finished_agrees",
    "run_finished_lists", "attested_blobs", "export_events", "export_work_queue", "export_tasks", "export_gate",
    "export_intoto", "export_promotion", "promotion_decision", "promotion_signature", "promotion_outcome",
    "repository", "record_signatures", "evidence_ref", "evidence_chain", "promoted_head", "policy_version",
    "target_ref", "git_objects", "base_tree_hash", "diff_digest", "reapply", "tree"}


def _failures(out: dict) -> dict[tuple[str, str | None], str]:
    return {(f["kind"], f["subject"]): f["status"] for f in out["failures"]}


def test_an_untampered_run_verifies_with_every_export_checked(run_copy) -> None:
    ops, run_id, _ = run_copy
    rc, out = _verify(ops, run_id)
    assert rc == 0 and out["valid"], out["reasons"]
    here = _verify_here(ops, run_id)
    assert here["checks"] == out["checks"]  # the CLI printed verify_run's checks, one for one
    assert {c["kind"] for c in out["checks"]} == HONEST_CHECKS
    assert out["outcome"] == "promoted" and out["run_status"] == "blocked"
    assert here["run_reason"] == "evidence chain incomplete or human gate"  # as run.finished gives it
    # a check that passed never says something was missing
    assert all(c["status"] == "ok" and not c["detail"] for c in out["checks"])


def _append_space(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b" ")


def _intoto_payload_swap(path: Path) -> None:
    """Re-encode line 1's statement with another predicate, keeping its signature."""
    lines = path.read_bytes().split(b"\n")
    env = json.loads(lines[0])
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["passed"] = not stmt["predicate"].get("passed")
    env["payload"] = base64.b64encode(json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()).decode()
    lines[0] = json.dumps(env, sort_keys=True).encode()
    path.write_bytes(b"\n".join(lines))


def _flip_byte(path: Path) -> None:
    """One byte changed, the length kept (a length comparison would not see it)."""
    data = bytearray(path.read_bytes())
    i = data.index(b'"', len(data) // 2)
    data[i + 1] = ord("Z") if data[i + 1] != ord("Z") else ord("Y")
    path.write_bytes(bytes(data))


def _intoto_drop_last_line(path: Path) -> None:
    lines = path.read_bytes().rstrip(b"\n").split(b"\n")
    path.write_bytes(b"\n".join(lines[:-1]) + b"\n")


def _intoto_drop_line(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[1:]))


def _task_status(path: Path) -> None:
    obj = json.loads(path.read_text())
    obj["status"] = "failed"
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _event_payload(path: Path) -> None:
    """Edit the readable fields of an exported event and re-render it as dome does."""
    obj = json.loads(path.read_text())
    obj["payload"]["status"] = "promoted"
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _extra_event(rdir: Path) -> Path:
    src = max((rdir / "events").glob("event.*.json"), key=lambda p: int(p.name.split(".")[1]))
    n = int(src.name.split(".")[1]) + 50
    dst = rdir / "events" / f"event.{n}.json"
    shutil.copy(src, dst)
    return dst


def _finished_event(rdir: Path) -> Path:
    for p in (rdir / "events").glob("event.*.json"):
        if json.loads(p.read_text())["topic"] == "run.finished":
            return p
    raise AssertionError("no run.finished export")


TAMPER = {
    # name: (tamper(run_dir) -> the tampered file, expected kind, expected status)
    "event_byte": (lambda d: (_append_space(p := d / "events" / "event.3.json"), p)[1], "export_events", "failed"),
    "event_fields": (lambda d: (_event_payload(p := _finished_event(d)), p)[1], "export_events", "failed"),
    "event_removed": (lambda d: ((p := d / "events" / "event.2.json").unlink(), p)[1], "export_events", "missing"),
    "event_extra": (lambda d: _extra_event(d), "export_events", "failed"),
    "work_queue": (lambda d: (_append_space(p := d / "work.queue.json"), p)[1], "export_work_queue", "failed"),
    "task_result": (lambda d: (_task_status(p := d / "tasks" / "risky" / "task.result.json"), p)[1],
                    "export_tasks", "failed"),
    "task_result_removed": (lambda d: ((p := d / "tasks" / "risky" / "task.result.json").unlink(), p)[1],
                            "export_tasks", "missing"),
    "task_output_diff": (lambda d: (_append_space(p := next((d / "tasks" / "risky" / "outputs").glob("*.diff"))),
                                    p)[1], "export_tasks", "failed"),
    "gate_decision_removed": (lambda d: ((p := d / "gate" / "gate.decision.json").unlink(), p)[1], "export_gate",
                              "missing"),
    "gate_decision": (lambda d: (_append_space(p := d / "gate" / "gate.decision.json"), p)[1], "export_gate",
                      "failed"),
    "promotion_decision": (lambda d: (_append_space(p := d / "promotion" / "promotion.decision.json"), p)[1],
                           "export_promotion", "failed"),
    "promotion_extra": (lambda d: ((p := d / "promotion" / "note.json").write_text("{}"), p)[1],
                        "export_promotion", "failed"),
    "intoto_payload": (lambda d: (_intoto_payload_swap(p := d / "promotion" / "evidence.intoto.jsonl"), p)[1],
                       "export_intoto", "failed"),
    "intoto_line_removed": (lambda d: (_intoto_drop_line(p := d / "promotion" / "evidence.intoto.jsonl"), p)[1],
                            "export_intoto", "failed"),
    "intoto_removed": (lambda d: ((p := d / "promotion" / "evidence.intoto.jsonl").unlink(), p)[1],
                       "export_intoto", "missing"),
}


# tampers a length comparison or a line count that ignores the last line would miss
TAMPER_KEEPING_SHAPE = {
    "gate_decision_same_length": (lambda d: (_flip_byte(p := d / "gate" / "gate.decision.json"), p)[1],
                                  "export_gate", "failed"),
    "intoto_last_line_removed": (lambda d: (_intoto_drop_last_line(p := d / "promotion" / "evidence.intoto.jsonl"),
                                            p)[1], "export_intoto", "failed"),
}


@pytest.mark.parametrize("name", sorted(TAMPER_KEEPING_SHAPE))
def test_a_tamper_that_keeps_the_files_length_or_its_first_lines_fails(run_copy, name: str) -> None:
    _tampered_fails(run_copy, name, *TAMPER_KEEPING_SHAPE[name])


@attack("export-tamper")
@pytest.mark.parametrize("name", sorted(TAMPER))
def test_tampering_with_an_exported_file_makes_verify_fail_naming_the_file(run_copy, name: str) -> None:
    _tampered_fails(run_copy, name, *TAMPER[name])


def _tampered_fails(run_copy, name: str, tamper, kind: str, status: str) -> None:
    ops, run_id, rdir = run_copy
    path = tamper(rdir)
    rel = path.relative_to(rdir).as_posix()
    out = _verify_here(ops, run_id)
    assert not out["valid"], name
    named = {(f["kind"], (f["subject"] or "").split("#")[0]): f["status"] for f in out["failures"]}
    assert named.get((kind, rel)) == status, (name, out["failures"])
    human = dome_cli("verify", run_id, "--ops-root", str(ops))
    assert human.returncode == 1 and rel in human.stdout


def _drop_triggers(db: sqlite3.Connection) -> None:
    for (name,) in db.execute("select name from sqlite_master where type='trigger'").fetchall():
        db.execute(f"drop trigger {name}")


def test_a_promoted_run_verifies_and_agrees_with_run_finished(promoted_copy) -> None:
    ops, run_id, _ = promoted_copy
    rc, out = _verify(ops, run_id)
    assert rc == 0 and out["valid"], out["reasons"]
    here = _verify_here(ops, run_id)
    assert here["checks"] == out["checks"]
    assert out["run_status"] == "promoted" and out["outcome"] == "promoted"
    assert here["run_reason"] is None  # run.finished of a promoted run gives none
    assert {c["kind"] for c in out["checks"]} == HONEST_CHECKS


@attack("ledger-truncate-or-append")
def test_a_run_whose_run_finished_was_cut_from_the_ledger_is_invalid(promoted_copy) -> None:
    """Removing records from the end of a run leaves a valid hash chain (here: only
    run.finished, after the promotion decision); a run the run loop started must
    still show run.finished, and its exported copy now has no ledger record."""
    ops, run_id, rdir = promoted_copy
    fin = _finished_event(rdir)
    seq = int(fin.name.split(".")[1])
    db = sqlite3.connect(ops / "dome.db")
    _drop_triggers(db)
    db.execute("delete from events where run_id=? and sequence>=?", (run_id, seq))
    db.commit()
    db.close()
    rc, out = _verify(ops, run_id)
    assert rc == 1
    fails = _failures(out)
    assert fails.get(("run_finished", None)) == "missing"
    assert fails.get(("export_events", f"events/{fin.name}")) == "failed"


@attack("ledger-truncate-or-append")
@pytest.mark.parametrize("fixture", ["promoted_copy", "run_copy"])
def test_an_unsigned_record_after_run_finished_is_refused(request, fixture: str) -> None:
    ops, run_id, _ = request.getfixturevalue(fixture)
    ledger = Ledger.open(None, ops)
    try:
        rec = ledger.append(run_id, "task.progress", {"says": "late news"})
    finally:
        ledger.close()
    rc, out = _verify(ops, run_id)
    assert rc == 1
    assert _failures(out) == {("signed_after_finish", f"#{rec.sequence} task.progress"): "failed"}


@attack("ledger-truncate-or-append")
def test_a_record_signed_by_an_unknown_key_after_run_finished_is_refused(promoted_copy) -> None:
    from registry.signing import SigningKey
    ops, run_id, _ = promoted_copy
    ledger = Ledger.open(None, ops)
    try:
        rec = ledger.append(run_id, "task.progress", {"says": "x"}, signer=SigningKey.generate())
    finally:
        ledger.close()
    rc, out = _verify(ops, run_id)
    assert rc == 1
    assert _failures(out).get(("signed_after_finish", f"#{rec.sequence} task.progress")) == "failed"


@attack("export-tamper")
def test_promoted_ref_must_hold_the_decisions_head(finished_run, run_copy) -> None:
    """The ledger says promoted; the ref must contain that head (where the repo is available)."""
    repo, _, _ = finished_run
    ops, run_id, _ = run_copy
    rc, out = _verify(ops, run_id)
    ref, head = out["to_ref"], out["head_ref"]
    parent = git(repo, "rev-parse", f"{head}^")
    git(repo, "update-ref", ref, parent)
    try:
        rc, out = _verify(ops, run_id)
        assert rc == 1 and _failures(out).get(("target_ref", ref)) == "failed"
        git(repo, "update-ref", "-d", ref)
        rc, out = _verify(ops, run_id)
        assert rc == 1 and _failures(out).get(("target_ref", ref)) == "missing"
    finally:
        git(repo, "update-ref", ref, head)


# -- correctly signed, inconsistent decisions: each verify check judged alone ------------------

def _append_signed(ops: Path, run_id: str, topic: str, artifact: dict) -> None:
    """Append a record signed by the run's own key (the admin's, as `dome promote` signs)."""
    from coordinator.integration.evidence import sign_artifact
    from coordinator.keys import load_or_create_signing_key
    key = load_or_create_signing_key(ops)
    ledger = Ledger.open(None, ops)
    try:
        ledger.append(run_id, topic, sign_artifact(artifact, key), signer=key)
    finally:
        ledger.close()


def _last_record(ops: Path, run_id: str, topic: str):
    from coordinator.integration.recorder import records_of
    ledger = Ledger.open(None, ops)
    try:
        return [r for r in records_of(ledger, run_id) if r.topic == topic][-1]
    finally:
        ledger.close()


def _redecide(ops: Path, run_id: str, **changes) -> dict:
    from coordinator.integration.evidence import T_PROMOTION
    promo = _last_record(ops, run_id, T_PROMOTION).artifact
    _append_signed(ops, run_id, T_PROMOTION, {**promo, **changes})
    return promo


def test_a_signed_decision_whose_evidence_ref_digest_is_another_fails_that_ref(promoted_copy) -> None:
    ops, run_id, _ = promoted_copy
    from coordinator.integration.evidence import T_PROMOTION
    refs = [dict(r) for r in _last_record(ops, run_id, T_PROMOTION).artifact["evidence_refs"]]
    refs[0]["digest"] = "sha256:" + "e" * 64
    _redecide(ops, run_id, evidence_refs=refs)
    out = _verify_here(ops, run_id)
    assert _failures(out).get(("evidence_ref", f"{refs[0]['kind']}:{refs[0]['object_id']}")) == "failed", out["failures"]
    others = [c for c in out["checks"] if c["kind"] == "evidence_ref" and c["status"] == "ok"]
    assert len(others) == len(refs) - 1


def test_a_signed_decision_naming_another_head_fails_the_promoted_head_check(promoted_run, promoted_copy) -> None:
    repo, _, _ = promoted_run
    ops, run_id, _ = promoted_copy
    from coordinator.integration.evidence import T_PROMOTION
    head = _last_record(ops, run_id, T_PROMOTION).artifact["from_head_ref"]
    _redecide(ops, run_id, from_head_ref=git(repo, "rev-parse", f"{head}^"))
    assert _failures(_verify_here(ops, run_id)).get(("promoted_head", None)) == "failed"


def test_a_signed_decision_naming_another_policy_fails_the_policy_version_check(promoted_copy) -> None:
    ops, run_id, _ = promoted_copy
    _redecide(ops, run_id, policy_digest="sha256:" + "e" * 64)
    out = _verify_here(ops, run_id)
    assert _failures(out).get(("policy_version", None)) == "failed", out["failures"]


def test_a_signed_apply_result_naming_a_commit_of_another_tree_fails_the_replay(promoted_run, promoted_copy) -> None:
    """A later, correctly signed ApplyResult names a checkpoint whose tree is not what the
    layer's diff makes on its parent: the replay rebuilds the tree and the two differ."""
    repo, _, _ = promoted_run
    ops, run_id, _ = promoted_copy
    from coordinator.integration.evidence import T_APPLY, T_PROMOTION
    apply = _last_record(ops, run_id, T_APPLY).artifact
    base = apply["base_ref"]
    wrong = git(repo, "commit-tree", f"{base}^{{tree}}", "-p", base, "-m",
                f"other\n\nDome-Proposal: {apply['proposal_id']}\nDome-Diff-Digest: {apply['proposal_id']} "
                f"{apply['diff_digest']}")
    promo = _last_record(ops, run_id, T_PROMOTION).artifact
    _append_signed(ops, run_id, T_APPLY, {**apply, "head_ref": wrong})
    _append_signed(ops, run_id, T_PROMOTION, promo)
    out = _verify_here(ops, run_id)
    assert _failures(out).get(("tree", wrong[:12])) == "failed", out["failures"]


def test_a_repository_that_is_not_there_is_missing_and_named(promoted_copy, tmp_path: Path) -> None:
    """The repository the caller names must exist; the finding names it (a reader must know which)."""
    from coordinator.integration.verify import verify_run
    from coordinator.keys import load_keyring
    ops, run_id, _ = promoted_copy
    gone = tmp_path / "no-such-repo"
    ledger = Ledger.open(None, ops)
    try:
        rep = verify_run(ledger, run_id, load_keyring(ops), repo=gone, ops_root=ops)
    finally:
        ledger.close()
    assert not rep.valid
    assert [(c.status.value, c.subject) for c in rep.failures if c.kind.value == "repository"] == [
        ("missing", str(gone))]


def test_an_evidence_record_changed_under_its_own_payload_digest_fails_its_ref(promoted_copy) -> None:
    """The referenced record's body is re-digested: a body changed while the digest field it
    carries is left as it was fails the reference (the field alone proves nothing)."""
    import sqlite3
    from coordinator.integration.evidence import T_PROMOTION
    ops, run_id, _ = promoted_copy
    ref = dict(_last_record(ops, run_id, T_PROMOTION).artifact["evidence_refs"][0])
    db = sqlite3.connect(ops / "dome.db")
    try:
        for (name,) in db.execute("select name from sqlite_master where type='trigger'").fetchall():
            db.execute(f"drop trigger {name}")
        (payload,) = db.execute("select payload from events where run_id=? and sequence=?",
                                (run_id, int(ref["event_sequence"]))).fetchone()
        body = json.loads(payload)
        assert body.get("payload_digest") == ref["digest"]
        body["tampered"] = True
        db.execute("update events set payload=? where run_id=? and sequence=?",
                   (json.dumps(body), run_id, int(ref["event_sequence"])))
        db.commit()
    finally:
        db.close()
    out = _verify_here(ops, run_id)
    assert _failures(out).get(("evidence_ref", f"{ref['kind']}:{ref['object_id']}")) == "failed", out["failures"]


def test_the_lists_of_a_run_held_at_the_gate_are_judged_against_no_decision(run_copy) -> None:
    """Before `dome promote`, a held run has no decision before its run.finished: the lists it
    reports are not compared with any other record (the gate's or the consent request's)."""
    from coordinator.integration.export_checks import run_lifecycle
    from coordinator.integration.recorder import records_of
    from coordinator.integration.verify import _finish_lists
    from coordinator.integration.verify_result import VerifyReport
    ops, run_id, _ = run_copy
    ledger = Ledger.open(None, ops)
    try:
        events = ledger.events(run_id)
        _, _, last = run_lifecycle(events)
        held = [r for r in records_of(ledger, run_id) if r.sequence < last]  # the ledger as it stood then
        assert held and all(r.topic != "promotion.computed" for r in held)
        rep = VerifyReport(run_id)
        _finish_lists(rep, ledger, events, last, held)
    finally:
        ledger.close()
    assert [(c.kind.value, c.ok) for c in rep.checks] == [("run_finished_lists", True)], rep.reasons()
