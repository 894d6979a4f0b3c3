"""The checks that make up `dome verify`'s proof, each judged alone on small inputs:
tampers that keep a file's length, an in-toto file missing its last line, records
after run.finished, and the tree rule that an existing file may not gain the
executable bit even when two proposals split that change between them. Fast: no
`dome run`, so the mutation runner (tests/mutation.py) can run these per mutant."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coordinator.integration import export_checks as ex
from coordinator.integration.evidence import T_GATE, T_PROMOTION, Record
from coordinator.integration.policy import IntegrationPolicy
from coordinator.integration.tree_rules import entry_rejections
from ledger import Ledger
from registry.canonical import canonical_json
from registry.signing import Keyring, SigningKey, dsse_sign

KEY = SigningKey(b"\x05" * 32)
KEYRING = Keyring({KEY.kid: KEY.public})


def _flip(path: Path, at: int = -3) -> None:
    """Change one byte, keeping the length (the tamper a length check would miss)."""
    data = bytearray(path.read_bytes())
    data[at] = ord("Z") if data[at] != ord("Z") else ord("Y")
    path.write_bytes(bytes(data))


def _kinds(results) -> list[tuple[str, str, str | None]]:
    return [(r.kind.value, r.status.value, r.subject) for r in results]


# -- exported files: byte for byte, not length for length --------------------------------

def test_a_gate_file_changed_in_one_byte_of_the_same_length_fails(tmp_path: Path) -> None:
    gate = Record(4, T_GATE, {"passed": True, "missing": [], "links": [{"link": "policy", "status": "ok"}]})
    f = tmp_path / "gate" / "gate.decision.json"
    f.parent.mkdir()
    f.write_bytes(canonical_json(gate.artifact) + b"\n")
    assert _kinds(ex.check_gate(tmp_path, [gate])) == [("export_gate", "ok", None)]
    size = f.stat().st_size
    _flip(f)
    assert f.stat().st_size == size
    assert _kinds(ex.check_gate(tmp_path, [gate])) == [("export_gate", "failed", ex.GATE_FILE)]


def test_an_exported_file_the_ledger_does_not_name_fails_and_a_removed_one_is_missing(tmp_path: Path) -> None:
    gate = Record(4, T_GATE, {"passed": False})
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "extra.json").write_text("{}")
    assert sorted(_kinds(ex.check_gate(tmp_path, [gate]))) == [
        ("export_gate", "failed", "gate/extra.json"), ("export_gate", "missing", ex.GATE_FILE)]
    assert ex.check_gate(tmp_path / "nothing", []) == []  # no gate record and no folder: nothing to check


def test_the_consent_token_is_left_out_only_once_consent_was_requested(tmp_path: Path) -> None:
    gate = Record(4, T_GATE, {"passed": False})
    d = tmp_path / "gate"
    d.mkdir()
    (d / "gate.decision.json").write_bytes(canonical_json(gate.artifact) + b"\n")
    (d / "consent.token").write_text("secret\n")
    asked = Record(5, "promotion.consent_requested", {"token_digest": "sha256:x"})
    assert _kinds(ex.check_gate(tmp_path, [gate, asked])) == [("export_gate", "ok", None)]
    assert _kinds(ex.check_gate(tmp_path, [gate])) == [("export_gate", "failed", ex.CONSENT_FILE)]


def _events(tmp_path: Path, n: int = 3):
    ledger = Ledger.open(None, tmp_path / "ops")
    try:
        for i in range(n):
            ledger.append("r1", "task.progress", {"i": i, "text": "abcdef"})
        return ledger.events("r1")
    finally:
        ledger.close()


def test_an_event_file_changed_in_one_byte_of_the_same_length_fails(tmp_path: Path) -> None:
    from ledger.export import render
    evs = _events(tmp_path)
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    for e in evs:
        (run / "events" / f"event.{e.sequence}.json").write_bytes(render(e))
    last = evs[-1].sequence
    ok = ex.check_events(run, evs, required_through=last, run_loop=True)
    assert _kinds(ok) == [("export_events", "ok", None)]
    # the run loop's older rendering (indented, ASCII-escaped) is the same record
    p = run / "events" / f"event.{evs[0].sequence}.json"
    p.write_text(json.dumps(evs[0].to_json(), indent=2, sort_keys=True) + "\n")
    assert _kinds(ex.check_events(run, evs, required_through=last, run_loop=True)) == [("export_events", "ok", None)]
    _flip(p, at=p.read_bytes().index(b"abcdef"))
    assert _kinds(ex.check_events(run, evs, required_through=last, run_loop=True)) == [
        ("export_events", "failed", f"events/{p.name}")]


def test_event_files_required_only_through_run_finished(tmp_path: Path) -> None:
    evs = _events(tmp_path)
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    first = evs[0].sequence
    got = _kinds(ex.check_events(run, evs, required_through=first, run_loop=True))
    assert got == [("export_events", "missing", f"events/event.{first}.json")]  # later ones are not required
    assert _kinds(ex.check_events(run, evs, required_through=None, run_loop=True)) == [("export_events", "ok", None)]
    assert ex.check_events(tmp_path / "none", evs, required_through=first, run_loop=False) == []
    assert _kinds(ex.check_events(tmp_path / "none", evs, required_through=first, run_loop=True)) == [
        ("export_events", "missing", "events/")]


def test_a_work_queue_with_the_same_json_in_another_rendering_fails(tmp_path: Path) -> None:
    from registry.canonical import digest_json
    q = {"version": 1, "tasks": [{"id": "a", "argv": ["x"]}]}  # keys out of order: the file sorts them
    f = tmp_path / "work.queue.json"
    f.write_text(json.dumps(q, indent=2, sort_keys=True) + "\n")
    started = {"work_queue_digest": digest_json(q)}
    res, raw = ex.check_work_queue(tmp_path, started)
    assert _kinds(res) == [("export_work_queue", "ok", "work.queue.json")] and raw == q
    f.write_text(json.dumps(q, sort_keys=True) + "\n")  # same JSON, same digest, other bytes
    res, raw = ex.check_work_queue(tmp_path, started)
    assert _kinds(res) == [("export_work_queue", "failed", "work.queue.json")] and raw is None
    res, _ = ex.check_work_queue(tmp_path, {"work_queue_digest": "sha256:" + "0" * 64})
    assert _kinds(res) == [("export_work_queue", "failed", "work.queue.json")]
    f.unlink()
    assert _kinds(ex.check_work_queue(tmp_path, started)[0]) == [("export_work_queue", "missing", "work.queue.json")]


# -- in-toto statements ----------------------------------------------------------------------

STATEMENTS = [{"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": f"s{i}"}], "predicate": {"i": i}}
              for i in range(3)]


def _intoto(path: Path, statements=STATEMENTS, key: SigningKey = KEY, trailing: bool = True) -> Path:
    lines = [json.dumps(dsse_sign(ex.INTOTO_PAYLOAD, canonical_json(s), key), sort_keys=True) for s in statements]
    path.write_text("\n".join(lines) + ("\n" if trailing else ""))
    return path


@pytest.mark.parametrize("trailing", [True, False])
def test_an_intoto_file_missing_its_last_statement_fails(tmp_path: Path, trailing: bool) -> None:
    f = _intoto(tmp_path / "e.jsonl", trailing=trailing)
    assert _kinds(ex.check_intoto(f, STATEMENTS, KEYRING)) == [("export_intoto", "ok", ex.INTOTO_FILE)]
    _intoto(f, STATEMENTS[:-1], trailing=trailing)  # every line left is signed and right
    got = ex.check_intoto(f, STATEMENTS, KEYRING)
    assert _kinds(got) == [("export_intoto", "failed", ex.INTOTO_FILE)]
    assert "2 statements, the ledger accounts for 3" in got[0].detail


def test_an_intoto_line_unsigned_reordered_or_rendered_otherwise_fails(tmp_path: Path) -> None:
    f = _intoto(tmp_path / "e.jsonl", [STATEMENTS[0], STATEMENTS[2], STATEMENTS[1]])
    assert [r.subject for r in ex.check_intoto(f, STATEMENTS, KEYRING)] == [
        f"{ex.INTOTO_FILE}#2", f"{ex.INTOTO_FILE}#3"]
    _intoto(f, key=SigningKey(b"\x06" * 32))
    assert {r.subject for r in ex.check_intoto(f, STATEMENTS, KEYRING)} == {f"{ex.INTOTO_FILE}#{i}" for i in (1, 2, 3)}
    _intoto(f)
    lines = f.read_text().splitlines()
    lines[1] = json.dumps(json.loads(lines[1]), sort_keys=True, separators=(",", ":"))  # same envelope, compact
    f.write_text("\n".join(lines) + "\n")
    got = ex.check_intoto(f, STATEMENTS, KEYRING)
    assert [(r.subject, "not a DSSE envelope" in r.detail) for r in got] == [(f"{ex.INTOTO_FILE}#2", True)]
    f.write_text("not json\n" * 3)
    assert len(ex.check_intoto(f, STATEMENTS, KEYRING)) == 3
    assert _kinds(ex.check_intoto(None, STATEMENTS, KEYRING)) == [("export_intoto", "missing", ex.INTOTO_FILE)]


def test_promotion_files_without_a_promotion_record_are_unaccounted(tmp_path: Path) -> None:
    d = tmp_path / "promotion"
    d.mkdir()
    (d / "promotion.decision.json").write_text("{}")
    assert _kinds(ex.check_promotion(tmp_path, [], KEYRING)) == [
        ("export_promotion", "failed", ex.PROMOTION_FILE)]
    promo = Record(9, T_PROMOTION, {"outcome": "promoted", "evidence_refs": []})
    (d / "promotion.decision.json").write_bytes(canonical_json(promo.artifact) + b"\n")
    _intoto(d / "evidence.intoto.jsonl", [{"x": 1}])
    got = _kinds(ex.check_promotion(tmp_path, [promo], KEYRING))
    assert ("export_promotion", "ok", None) in got and ("export_intoto", "failed", f"{ex.INTOTO_FILE}#1") in got


# -- what follows run.finished ------------------------------------------------------------

def test_only_signed_records_may_follow_run_finished(tmp_path: Path) -> None:
    ledger = Ledger.open(None, tmp_path / "ops")
    try:
        ledger.append("r1", ex.RUN_STARTED, {"work_queue_digest": "x"})
        fin = ledger.append("r1", ex.RUN_FINISHED, {"status": "blocked"})
        signed = ledger.append("r1", "promotion.computed", {"a": 1}, signer=KEY)
        evs = ledger.events("r1")
        assert ex.run_lifecycle(evs) == ({"work_queue_digest": "x"}, fin.sequence, fin.sequence)
        assert _kinds(ex.check_signed_after_finish(evs, fin.sequence, KEYRING)) == [("signed_after_finish", "ok", None)]
        late = ledger.append("r1", "task.progress", {"late": True})
        other = ledger.append("r1", "task.progress", {"late": 2}, signer=SigningKey(b"\x07" * 32))
        evs = ledger.events("r1")
        assert _kinds(ex.check_signed_after_finish(evs, fin.sequence, KEYRING)) == [
            ("signed_after_finish", "failed", f"#{late.sequence} task.progress"),
            ("signed_after_finish", "failed", f"#{other.sequence} task.progress")]
        assert signed.sequence > fin.sequence
        fin2 = ledger.append("r1", ex.RUN_FINISHED, {"status": "promoted"}, signer=KEY)
        assert ex.run_lifecycle(ledger.events("r1"))[1:] == (fin.sequence, fin2.sequence)
        assert ex.run_lifecycle([]) == (None, None, None)
    finally:
        ledger.close()


# -- the tree rule for the executable bit ---------------------------------------------------

EXEC, FILE, LINK = "100755", "100644", "120000"
OID = "a" * 40


@pytest.mark.parametrize("before, after, allowed, want", [
    ((FILE, OID), (EXEC, OID), False, ["POLICY_MODE_EXEC"]),   # an existing file gains the bit
    (None, (EXEC, OID), False, ["POLICY_MODE_EXEC"]),          # a new file is born with it
    ((EXEC, OID), (EXEC, OID), False, []),                     # it had the bit already
    ((FILE, OID), (EXEC, OID), True, []),                      # the policy allows it
    ((FILE, OID), (LINK, OID), False, []),                     # symlinks are allowed by default
    ((FILE, OID), None, False, []),                            # removed
    ((FILE, OID), ("160000", OID), True, ["POLICY_GITLINK"]),
    ((FILE, OID), ("100664", OID), True, ["POLICY_MODE_INVALID"]),
])
def test_entry_mode_rules_compare_with_the_head_before_the_apply(before, after, allowed, want) -> None:
    pol = IntegrationPolicy(allow_exec_bit=allowed)
    assert [r.code for r in entry_rejections("tool.sh", before, after, pol)] == want


def test_a_new_symlink_needs_the_policy_and_an_old_one_does_not() -> None:
    pol = IntegrationPolicy(allow_symlinks=False)
    assert [r.code for r in entry_rejections("l", None, (LINK, OID), pol)] == ["POLICY_SYMLINK_FORBIDDEN"]
    assert entry_rejections("l", (LINK, OID), (LINK, OID), pol) == []


def _exec_repo(tmp_path: Path) -> Path:
    from tests.conftest import git, make_repo
    repo = make_repo(tmp_path / "repo")
    (repo / "run.sh").write_text("echo hi\n")
    (repo / "plain.sh").write_text("echo plain\n")
    os.chmod(repo / "run.sh", 0o755)
    git(repo, "add", "run.sh", "plain.sh")
    git(repo, "commit", "-qm", "scripts")
    assert git(repo, "ls-files", "-s", "run.sh").startswith(EXEC)
    return repo


def test_the_canvas_alone_refuses_an_existing_file_gaining_the_exec_bit(tmp_path: Path) -> None:
    """The tree rule judged on a real canvas, with the diff-level checks out of the way:
    what the canvas would write is 644 -> 755 on an existing file."""
    from coordinator.integration.canvas import Canvas
    from registry.diffs import parse_diff
    from tests.integration.conftest import head
    repo = _exec_repo(tmp_path)
    with Canvas(repo, head(repo), run_id="r1", create_worktree=False) as canvas:
        att = canvas.try_apply(parse_diff(b"diff --git a/plain.sh b/plain.sh\nold mode 100644\nnew mode 100755\n"))
        assert [v.code for v in att.violations] == ["POLICY_MODE_EXEC"] and not att.clean
        keep = canvas.try_apply(parse_diff(b"diff --git a/run.sh b/run.sh\nold mode 100755\nnew mode 100644\n"))
        assert keep.clean and not keep.violations  # losing the bit is fine


def test_two_proposals_that_split_an_exec_bit_between_them_do_not_both_land(tmp_path: Path) -> None:
    """The base has an executable `run.sh`. Proposal A clears its bit (allowed); proposal B,
    written against the same base, edits its text with the base's mode on its `index` line
    (allowed: that is the base's mode). Each lands alone; stacked A then B, the file would go
    from 644 back to 755. The canvas refuses B's stated mode on top of A, so the stack never
    holds an existing file that gained the bit."""
    from tests.conftest import git
    from tests.integration.test_hostile_proposals import blob, crafted, land
    repo = _exec_repo(tmp_path)
    old, new = git(repo, "rev-parse", "HEAD:run.sh"), blob(repo, b"echo pwned\n")
    clear = b"diff --git a/run.sh b/run.sh\nold mode 100755\nnew mode 100644\n"
    edit = (f"diff --git a/run.sh b/run.sh\nindex {old}..{new} 100755\n--- a/run.sh\n+++ b/run.sh\n"
            "@@ -1 +1 @@\n-echo hi\n+echo pwned\n").encode()
    a, b = crafted(repo, "a-clear", clear), crafted(repo, "b-edit", edit)
    assert land(repo, [a]).included == ["a-clear"] and land(repo, [b]).included == ["b-edit"]
    out = land(repo, [a, b])
    assert len(out.included) == 1, out
    dropped = ({"a-clear", "b-edit"} - set(out.included)).pop()
    assert out.why[dropped]["state"] in ("dropped", "rejected"), out.why
    mode = git(repo, "ls-tree", out.tree, "run.sh").split()[0]
    assert mode == (EXEC if out.included == ["b-edit"] else FILE)


def test_task_files_cannot_be_judged_without_the_runs_work_queue(tmp_path: Path) -> None:
    got = ex.check_tasks(tmp_path, [], None, "r1", lambda d: b"")
    assert _kinds(got) == [("export_tasks", "missing", "tasks/")]
    assert got[0].detail == "cannot rebuild without the run's work queue"
    bad = ex.check_tasks(tmp_path, [], {"tasks": "not a list"}, "r1", lambda d: b"")
    assert _kinds(bad) == [("export_tasks", "missing", "tasks/")] and bad[0].detail.startswith("cannot rebuild: ")


def test_every_file_is_judged_after_an_unreadable_or_unaccounted_one(tmp_path: Path) -> None:
    from coordinator.integration.verify_result import CheckKind
    root = tmp_path / "d"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x").mkdir()                      # where a file should be: unreadable
    (root / "a" / "y").write_bytes(b"2-changed")    # differs
    (root / "a" / "w").write_bytes(b"?")            # not accounted for, sorted first
    (root / "a" / "z").write_bytes(b"3")            # fine
    got = ex._compare(CheckKind.EXPORT_TASKS, {"a/x": b"1", "a/y": b"2", "a/z": b"3", "a/v": b"0"},
                      ex._files(root / "a"), ["a/v"])
    assert [(r.status.value, r.subject) for r in got] == [
        ("missing", "a/v"), ("failed", "a/w"), ("failed", "a/x"), ("failed", "a/y")]


def test_the_older_rendering_is_accepted_for_every_event_after_an_odd_file(tmp_path: Path) -> None:
    evs = _events(tmp_path)
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    (run / "events" / "a-note.json").write_text("{}")         # no record: judged as unaccounted
    first, *rest = evs
    (run / "events" / f"event.{first.sequence}.json").mkdir()  # a record's file, unreadable
    for e in rest:
        (run / "events" / f"event.{e.sequence}.json").write_text(
            json.dumps(e.to_json(), indent=2, sort_keys=True) + "\n")
    got = ex.check_events(run, evs, required_through=evs[-1].sequence, run_loop=True)
    assert [(r.status.value, r.subject) for r in got] == [
        ("failed", "events/a-note.json"), ("failed", f"events/event.{first.sequence}.json")]


def test_a_chain_of_links_is_followed_up_to_the_hop_limit_and_refused_past_it() -> None:
    """The first link plus MAX_LINK_HOPS more are followed; one more is a loop (a bound on the
    work, like the kernel's ELOOP; a chain that long escaping is caught either way)."""
    from coordinator.integration.tree_rules import MAX_LINK_HOPS, symlink_escape

    def chain(n: int):
        tree = {f"l{i}": (LINK, f"l{i + 1}") for i in range(n - 1)}
        tree[f"l{n - 1}"] = (LINK, "file.txt")
        tree["file.txt"] = (FILE, "file.txt")
        return tree.get, lambda oid: oid.encode()

    assert symlink_escape("l0", *chain(MAX_LINK_HOPS + 1)) is None
    assert symlink_escape("l0", *chain(MAX_LINK_HOPS + 2)) == "symlink loop"


def test_an_escaping_link_is_charged_to_the_apply_that_made_it_and_named_with_its_target() -> None:
    from coordinator.integration.tree_rules import tree_rejections
    before = {"old": (LINK, "../outside")}      # the base's link already escaped: not this apply's fault
    after = {**before, "x": (LINK, "../../etc/passwd"), "ok": (LINK, "file.txt"), "file.txt": (FILE, "f")}
    read = lambda oid: oid.encode()  # noqa: E731 - the object id is the link's text here
    got = tree_rejections({"x": after["x"], "ok": after["ok"]}, before=before.get, after=after.get,
                          links=["x", "ok", "old"], read=read, policy=IntegrationPolicy())
    assert [(r.code, r.details) for r in got] == [
        ("POLICY_SYMLINK_ESCAPE", {"path": "x", "target": "../../etc/passwd"})]


def test_the_export_listing_names_every_file_and_only_empty_folders(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    (root / "a" / "outputs").mkdir(parents=True)
    (root / "a" / "task.result.json").write_text("{}")
    (root / "a" / "outputs" / "x.diff").write_text("d")
    (root / "b" / "empty").mkdir(parents=True)
    (root / "c").mkdir()
    (root / "c" / "z.json").write_text("{}")
    assert sorted(ex._files(root)) == ["tasks/a/outputs/x.diff", "tasks/a/task.result.json", "tasks/b/empty",
                                       "tasks/c/z.json"]
    assert ex._files(tmp_path / "none") == {}


def test_a_gate_record_without_its_exported_file_is_missing(tmp_path: Path) -> None:
    gate = Record(4, T_GATE, {"passed": True})
    assert _kinds(ex.check_gate(tmp_path, [gate])) == [("export_gate", "missing", ex.GATE_FILE)]


def test_sorted_keys_are_part_of_the_rendering(tmp_path: Path) -> None:
    """Indented but unsorted, the work queue is the same JSON with the same digest and still not
    dome's file; an in-toto envelope with its keys unsorted is not dome's line."""
    from registry.canonical import digest_json
    q = {"version": 1, "tasks": [{"id": "a"}]}
    (tmp_path / "work.queue.json").write_text(json.dumps(q, indent=2) + "\n")
    res, _ = ex.check_work_queue(tmp_path, {"work_queue_digest": digest_json(q)})
    assert _kinds(res) == [("export_work_queue", "failed", "work.queue.json")]
    f = tmp_path / "e.jsonl"
    f.write_text("\n".join(json.dumps(dsse_sign(ex.INTOTO_PAYLOAD, canonical_json(s), KEY)) for s in STATEMENTS)
                 + "\n")  # dsse_sign's own key order: payloadType, payload, signatures
    got = ex.check_intoto(f, STATEMENTS, KEYRING)
    assert [r.subject for r in got] == [f"{ex.INTOTO_FILE}#{i}" for i in (1, 2, 3)]
    assert all("not in dome's rendering" in r.detail for r in got)


def test_a_record_after_run_finished_with_a_key_id_but_no_signature_is_unsigned(tmp_path: Path) -> None:
    import dataclasses
    ledger = Ledger.open(None, tmp_path / "ops")
    try:
        fin = ledger.append("r1", ex.RUN_FINISHED, {"status": "blocked"}, signer=KEY)
        late = ledger.append("r1", "promotion.computed", {"a": 1}, signer=KEY)
        evs = ledger.events("r1")
    finally:
        ledger.close()
    for change in ({"signature": None}, {"kid": None}):
        cut = [dataclasses.replace(e, **change) if e.sequence == late.sequence else e for e in evs]
        got = ex.check_signed_after_finish(cut, fin.sequence, KEYRING)
        assert [(r.status.value, r.detail) for r in got] == [("failed", "unsigned record after run.finished")]
