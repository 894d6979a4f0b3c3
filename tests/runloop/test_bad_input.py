"""Bad input is refused before any work: exit 2, a typed error naming the
problem, and nothing written (no ops/ directory, no ledger, no database).

Each case starts from a queue that runs, changes one thing, and drives the
real CLI (`dome run ... --json`) on a real git repository."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from coordinator.cli.main import main as dome_main
from coordinator.workqueue import MAX_BYTES, WorkQueueError, branch_ref_problem, decode_json, parse_work_queue
from registry.errors import DomeError
from tests.conftest import git
from tests.attacks import attack


def _queue(repo: Path) -> dict[str, Any]:
    return {"artifact_kind": "dome.work.queue/v1", "repo": str(repo), "base_ref": "main", "determinism_seed": 3,
            "policy": "default", "promote_to": "refs/heads/dome/out",
            "tasks": [{"node_id": "a", "containers": [], "dependencies": [], "required_capabilities": ["write"],
                       "required_outputs": ["patch_proposal"],
                       "action_spec": {"intent": "command", "argv": ["sh", "-c", "echo a > a.txt"]}}],
            "validations": [{"suite": "command", "name": "tests", "argv": ["true"]}]}


def _run(tmp_path: Path, body: bytes | None, capsys, *, path: Path | None = None) -> tuple[int, dict, Path]:
    ops = tmp_path / "ops"
    qpath = path or tmp_path / "work.queue.json"
    if body is not None:
        qpath.write_bytes(body)
    rc = dome_main(["run", str(qpath), "--ops-root", str(ops), "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out), ops


def _mut(f: Callable[[dict], Any]) -> Callable[[dict], bytes]:
    def make(q: dict) -> bytes:
        f(q)
        return json.dumps(q).encode()
    return make


def _set_task(key: str, value: Any) -> Callable[[dict], bytes]:
    return _mut(lambda q: q["tasks"][0].__setitem__(key, value))


CASES: dict[str, tuple[Callable[[dict], bytes], str, str]] = {
    # name: (make the bytes from a good queue, expected code, a word the message must contain)
    "non_utf8": (lambda q: json.dumps(q).encode().replace(b'a.txt', b'\xff\xfe.txt'), "WORK_QUEUE_NOT_UTF8",
                 "UTF-8"),
    "deeply_nested": (lambda q: json.dumps({**q, "description": "x"}).replace(
        '"x"', "[" * 100000 + "]" * 100000).encode(), "WORK_QUEUE_TOO_DEEP", "deep"),
    "duplicate_key": (lambda q: json.dumps(q).replace('"policy": "default"',
                                                      '"policy": "default", "policy": "strict"').encode(),
                      "WORK_QUEUE_DUPLICATE_KEY", "policy"),
    "missing_repo": (_mut(lambda q: q.__setitem__("repo", "/nonexistent/repo")), "REPO_NOT_FOUND", "/nonexistent"),
    "unknown_policy": (_mut(lambda q: q.__setitem__("policy", "laissez_faire")), "GRANT_UNKNOWN_POLICY",
                       "laissez_faire"),
    "admin_capability": (_set_task("required_capabilities", ["write", "admin"]), "GRANT_ADMIN_NOT_GRANTABLE",
                         "admin"),
    "promote_to_head": (_mut(lambda q: q.__setitem__("promote_to", "HEAD")), "PROMOTE_TO_INVALID", "HEAD"),
    "promote_to_dotdot": (_mut(lambda q: q.__setitem__("promote_to", "refs/heads/../x")), "PROMOTE_TO_INVALID",
                          ".."),
    "promote_to_tag": (_mut(lambda q: q.__setitem__("promote_to", "refs/tags/v1")), "PROMOTE_TO_INVALID",
                       "refs/heads"),
    "unknown_intent": (_set_task("action_spec", {"intent": "litho.optimise"}), "UNKNOWN_INTENT", "litho.optimize"),
    "unknown_suite": (_mut(lambda q: q["validations"].append({"suite": "drcc"})), "UNKNOWN_SUITE", "drcc"),
    "policy_suite_not_defined": (_mut(lambda q: q.__setitem__("validations", [])), "SUITE_NOT_DEFINED", "tests"),
    "timeout_infinity": (lambda q: json.dumps({**q, "tasks": [{**q["tasks"][0], "timeout_s": 1}]}).replace(
        '"timeout_s": 1', '"timeout_s": Infinity').encode(), "WORK_QUEUE_NOT_FINITE", "Infinity"),
    "timeout_nan": (lambda q: json.dumps({**q, "tasks": [{**q["tasks"][0], "timeout_s": 1}]}).replace(
        '"timeout_s": 1', '"timeout_s": NaN').encode(), "WORK_QUEUE_NOT_FINITE", "NaN"),
    "timeout_overflow": (lambda q: json.dumps({**q, "tasks": [{**q["tasks"][0], "timeout_s": 1}]}).replace(
        '"timeout_s": 1', '"timeout_s": 1e999').encode(), "WORK_QUEUE_NOT_FINITE", "1e999"),
    "misspelled_field": (_mut(lambda q: q["tasks"][0].__setitem__("dependancies", q["tasks"][0].pop("dependencies"))),
                         "WORK_QUEUE_UNKNOWN_FIELD", "dependencies"),
    "missing_script": (_set_task("action_spec", {"intent": "command", "argv": ["./tools/gen.sh", "x"]}),
                       "SCRIPT_NOT_FOUND", "tools/gen.sh"),
    "missing_interpreted_script": (_set_task("action_spec", {"intent": "command",
                                                             "argv": ["python3", "tools/agent.py"]}),
                                   "SCRIPT_NOT_FOUND", "tools/agent.py"),
    # only a LATER task is wrong: every task is checked, not the first of each capability set
    "capability_missing_later_task": (_mut(lambda q: q["tasks"].append(
        {"node_id": "b", "containers": [], "dependencies": ["a"], "required_capabilities": ["read"],
         "required_outputs": [], "action_spec": {"intent": "litho.evaluate", "params": {"layout": "l.oas"}}})),
        "CAPABILITY_MISSING", "litho.evaluate"),
    "patch_without_capabilities": (_set_task("required_capabilities", []), "GRANT_SCOPE_EMPTY", "write"),
    "unknown_base_ref": (_mut(lambda q: q.__setitem__("base_ref", "no-such-branch")), "BASE_REF_NOT_FOUND",
                         "no-such-branch"),
}


@attack("hostile-queue")
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_fails_before_run_started_and_writes_nothing(name, git_repo, tmp_path, capsys):
    make, code, word = CASES[name]
    rc, out, ops = _run(tmp_path, make(_queue(git_repo)), capsys)
    assert rc == 2, out
    err = out["error"]
    assert err["code"] == code, err
    assert word in err["message"] + json.dumps(err["details"]) + " ".join(err["hints"]), err
    assert not ops.exists()  # no ops/runs, no keys, no dome.db
    assert git(git_repo, "for-each-ref", "refs/heads/dome") == ""


def test_the_good_queue_passes_preflight(git_repo, tmp_path):
    """The base of every case above is accepted: each case fails for its one change."""
    from coordinator.preflight import prepare

    q = tmp_path / "q.json"
    q.write_text(json.dumps(_queue(git_repo)))
    prep = prepare(q)
    assert prep.base_sha == git(git_repo, "rev-parse", "main") and prep.base_source == "base_ref"


def test_misspelled_field_is_named_with_did_you_mean(git_repo, tmp_path, capsys):
    q = _queue(git_repo)
    q["tasks"][0]["dependancies"] = q["tasks"][0].pop("dependencies")
    rc, out, _ = _run(tmp_path, json.dumps(q).encode(), capsys)
    err = out["error"]
    assert rc == 2 and err["message"] == "unknown field 'dependancies' at /tasks/0; did you mean 'dependencies'?"
    assert err["details"]["unknown_fields"] == [{"field": "dependancies", "at": "/tasks/0",
                                                 "did_you_mean": "dependencies"}]


def test_queue_path_that_is_a_directory(tmp_path, capsys):
    d = tmp_path / "q"
    d.mkdir()
    rc, out, ops = _run(tmp_path, None, capsys, path=d)
    assert rc == 2 and out["error"]["code"] == "WORK_QUEUE_IS_DIRECTORY" and not ops.exists()


@attack("hostile-queue")
def test_queue_path_that_is_a_fifo_or_too_large(tmp_path, capsys):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    rc, out, ops = _run(tmp_path, None, capsys, path=fifo)  # would block forever if it were read
    assert rc == 2 and out["error"]["code"] == "WORK_QUEUE_NOT_A_FILE" and not ops.exists()
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    rc, out, ops = _run(tmp_path, None, capsys, path=big)
    assert rc == 2 and out["error"]["code"] == "WORK_QUEUE_TOO_LARGE" and not ops.exists()


def test_an_existing_database_gets_no_rows(git_repo, tmp_path, capsys):
    """With a ledger already there, a refused queue adds nothing to it."""
    from ledger import Ledger

    ops = tmp_path / "ops"
    Ledger.open(None, ops).close()
    before = (ops / "dome.db").read_bytes()
    q = _queue(git_repo)
    q["policy"] = "nope"
    rc, out, _ = _run(tmp_path, json.dumps(q).encode(), capsys)
    assert rc == 2 and (ops / "dome.db").read_bytes() == before and not (ops / "runs").exists()


def test_target_moved_past_base_is_refused_with_a_fix_or_stacked_when_asked(git_repo, tmp_path, capsys):
    """promote_to moved (another run promoted to it): refused at load with how to fix it;
    with "if_target_moved": "stack" the run's base is the target's current commit."""
    from coordinator.preflight import prepare

    git(git_repo, "checkout", "-q", "-b", "dome/out")
    (git_repo / "promoted.txt").write_text("earlier run\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "promoted earlier")
    git(git_repo, "checkout", "-q", "main")
    moved = git(git_repo, "rev-parse", "dome/out")
    rc, out, ops = _run(tmp_path, json.dumps(_queue(git_repo)).encode(), capsys)
    err = out["error"]
    assert rc == 2 and err["code"] == "TARGET_NOT_ANCESTOR" and not ops.exists()
    assert any('"base_ref": "refs/heads/dome/out"' in h for h in err["hints"])
    assert any('"if_target_moved": "stack"' in h for h in err["hints"])
    q = tmp_path / "stack.json"
    q.write_text(json.dumps({**_queue(git_repo), "if_target_moved": "stack"}))
    prep = prepare(q)
    assert prep.base_sha == moved and prep.base_source == "promote_to" and prep.target_sha == moved
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**_queue(git_repo), "if_target_moved": "sometimes"}))
    with pytest.raises(DomeError):
        prepare(bad)


@pytest.mark.parametrize("ref", ["refs/heads/ok", "refs/heads/a/b-c_d.e", "HEAD", "main", "refs/heads/",
                                 "refs/heads/../x", "refs/heads/a..b", "refs/heads/.hidden", "refs/heads/x.lock",
                                 "refs/heads/a//b", "refs/heads/a/", "refs/heads/a.", "refs/heads/a@{1}",
                                 "refs/heads/a b", "refs/heads/a~1", "refs/heads/a^", "refs/heads/a:b",
                                 "refs/heads/a?", "refs/heads/a*", "refs/heads/a[", "refs/heads/a\\b",
                                 "refs/heads/a\x01", "refs/tags/v1"])
def test_branch_rule_agrees_with_git_check_ref_format(ref):
    git_ok = subprocess.run(["git", "check-ref-format", ref], capture_output=True, timeout=30).returncode == 0
    assert (branch_ref_problem(ref) is None) == (git_ok and ref.startswith("refs/heads/"))


def _json_values():
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text()
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                                 max_size=4),
                        max_leaves=20)


def _near_queue():
    """Queues that are almost valid: a good one with one field replaced by an arbitrary value."""
    good = {"artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main", "determinism_seed": 1,
            "policy": "default", "promote_to": "refs/heads/out",
            "tasks": [{"node_id": "a", "containers": [], "dependencies": [], "required_capabilities": ["write"],
                       "required_outputs": [], "action_spec": {"intent": "command", "argv": ["true"]}}]}
    keys = [*good, "timeout_s", "validations", "limits", "scheduling", "if_target_moved", "dependancies"]
    return st.tuples(st.sampled_from(keys), _json_values(), st.booleans()).map(
        lambda kv: ({**good, kv[0]: kv[1]} if not kv[2] else
                    {**good, "tasks": [{**good["tasks"][0], kv[0]: kv[1]}]}))


def _typed_or_ok(data: bytes) -> None:
    try:
        parse_work_queue(decode_json(data))
    except DomeError as exc:
        obj = exc.to_object()
        assert obj["code"] and obj["message"] and isinstance(obj["details"], dict)
        json.dumps(obj)  # the error itself is JSON (what --json prints)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.binary(max_size=200) | _json_values().map(lambda v: json.dumps(v).encode())
       | _near_queue().map(lambda v: json.dumps(v).encode()))
@attack("hostile-queue")
def test_queue_parser_never_raises_anything_but_a_typed_error(data):
    _typed_or_ok(data)


def test_typed_error_class_is_bad_input():
    with pytest.raises(WorkQueueError):
        parse_work_queue(decode_json(b'{"a": 1, "a": 2}'))
