"""`dome registry check|openrpc|gen-client|tag|resolve` on the real registry and
on deliberately broken copies (precise messages, exit 1)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from coordinator import registry_git
from registry.codegen import generate_python_client
from registry.contracts import REGISTRY_ROOT, default_registry, load_registry
from registry.openrpc import openrpc_document, spec_filter
from registry.pins import PinNotImmutable, parse_pin
from tests.conftest import dome_cli, git


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "registry"
    shutil.copytree(REGISTRY_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return root


def _edit(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2))


def test_shipped_registry_checks_clean() -> None:
    proc = dome_cli("registry", "check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    from registry.contracts import default_registry
    assert out["ok"] and out["methods"] == len(default_registry().methods) >= 31


BREAKAGES = [
    ("resolver maps to a missing method",
     lambda r: _edit(r / "policy/resolver_spec.json", lambda d: d["capabilities"]["read"]["methods"].append("nope")),
     "registry/policy/resolver_spec.json: capability 'read' maps to 'nope', which no contract defines"),
    ("method schema missing",
     lambda r: (r / "tools/repo_read/spec/schemas/grep.request.json").unlink(),
     "method grep: input schema 'tools/repo_read/grep.request' does not exist"),
    ("invalid schema",
     lambda r: _edit(r / "tools/drc/spec/schemas/run_drc.response.json", lambda d: d.__setitem__("type", 12)),
     "schema tools/drc/run_drc.response: not a valid draft 2020-12 schema"),
    ("golden response invalid",
     lambda r: _edit(r / "tools/repo_read/contract-tests/cases/get_base_ref_ok.json",
                     lambda d: d["response"].__setitem__("base_ref", "main")),
     "get_base_ref_ok.json: response does not validate against tools/repo_read/get_base_ref.response: /base_ref"),
    ("write method without idempotency key",
     lambda r: _edit(r / "tools/patch_proposal/spec/contract.json",
                     lambda d: d["methods"]["put_artifact"]["idempotency"].__setitem__("key_required", False)),
     "method put_artifact: side effect artifact_put requires idempotency.key_required: true"),
    ("error outside the taxonomy",
     lambda r: _edit(r / "tools/litho/spec/contract.json", lambda d: d["methods"]["evaluate"]["errors"].append("OOPS")),
     "method evaluate: error 'OOPS' is not in the contract's error taxonomy"),
    ("admin grantable by policy",
     lambda r: _edit(r / "policy/policy_spec.json",
                     lambda d: d["policies"]["default"]["capability_classes"]["admin"].__setitem__("grantable_to_workers", True)),
     "policy 'default': the admin class is never grantable to workers"),
    ("card with unknown capability",
     lambda r: _edit(r / "a2a/cards/runtime/agent_cli.card.json", lambda d: d["capabilities"].append("write:all")),
     "agent_cli.card.json: capability 'write:all' is not in the resolver spec"),
    ("profile names a foreign method",
     lambda r: _edit(r / "tools/repo_read/profiles/readonly.profile.json", lambda d: d["allow"]["operations"].append("submit_patch")),
     "allow.operations names 'submit_patch', not a method of repo_read"),
    ("duplicate method name",
     lambda r: _edit(r / "tools/drc/spec/contract.json", lambda d: d["methods"].__setitem__("grep", d["methods"]["run_drc"])),
     "method 'grep' is also defined by tool 'drc'"),
    ("generated client drifted",
     lambda r: (r / "clients/python/repo_read/default/client.py").write_text("# edited by hand\n"),
     "clients/python/repo_read/default: client.py: differs from a fresh generation"),
    ("no default policy",
     lambda r: _edit(r / "policy/policy_spec.json", lambda d: d["policies"].__setitem__("default2", d["policies"].pop("default"))),
     "registry/policy/policy_spec.json: a policy named 'default' must ship"),
]


@pytest.mark.parametrize("name,breakit,message", BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_registry_check_reports_each_breakage_precisely(tmp_path: Path, name: str, breakit, message: str) -> None:
    root = _copy(tmp_path)
    breakit(root)
    proc = dome_cli("registry", "check", "--root", str(root))
    assert proc.returncode == 1, proc.stdout
    assert message in proc.stdout, proc.stdout


def test_openrpc_from_the_same_source(tmp_path: Path) -> None:
    out = tmp_path / "openrpc.json"
    proc = dome_cli("registry", "openrpc", "--profile", "default", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc == openrpc_document(default_registry(), profile_id="default")
    names = {m["name"] for m in doc["methods"]}
    assert "promote" not in names and {"submit_patch", "open_layout", "evaluate"} <= names
    sp = next(m for m in doc["methods"] if m["name"] == "submit_patch")
    assert sp["x-dome"]["side_effect"] == "proposal_register" and sp["x-dome"]["replay"] == "Convergent"
    assert {p["name"]: p["required"] for p in sp["params"]}["idempotency_key"] is True
    assert all("$ref" not in json.dumps(m) for m in doc["methods"])
    full = openrpc_document(default_registry())
    assert {m["name"] for m in full["methods"]} == set(default_registry().methods)


def test_spec_filter_is_canonical_and_profile_bounded() -> None:
    reg = default_registry()
    a = spec_filter(reg, "repo_read", "readonly")
    assert sorted(a["methods"]) == ["get_base_ref", "list_tree", "read_file"]
    assert json.dumps(a) == json.dumps(spec_filter(load_registry(REGISTRY_ROOT), "repo_read", "readonly"))


def test_gen_client_is_byte_identical_and_matches_the_committed_clients(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        proc = dome_cli("registry", "gen-client", "--tool", "patch_proposal", "--profile", "default", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in a.iterdir())
    assert files == ["__init__.py", "client.py", "filtered_spec.json", "manifest.json", "types.py"]
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    committed = REGISTRY_ROOT / "clients" / "python" / "patch_proposal" / "default"
    for name in files:  # regenerate and diff against what is committed
        assert (a / name).read_bytes() == (committed / name).read_bytes(), name
    manifest = json.loads((a / "manifest.json").read_text())
    from registry.canonical import digest_bytes
    for name, digest in manifest["outputs"].items():
        assert digest_bytes((a / name).read_bytes()) == digest
    assert set(manifest["inputs"]) == {"spec", "contract", "profile", "generator_bundle"}
    assert manifest["generator"]["version"]
    assert dome_cli("registry", "gen-client", "--tool", "patch_proposal", "--profile", "default",
                    "--out", str(a), "--check").returncode == 0
    (a / "types.py").write_text("x = 1\n")
    assert dome_cli("registry", "gen-client", "--tool", "patch_proposal", "--profile", "default",
                    "--out", str(a), "--check").returncode == 1


def test_generated_client_is_typed_and_sends_schema_valid_requests(tmp_path: Path) -> None:
    reg = default_registry()
    files = generate_python_client(reg, "repo_read", "readonly")
    pkg = tmp_path / "gen_readonly"
    pkg.mkdir()
    for name, data in files.items():
        (pkg / name).write_bytes(data)
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib
        mod = importlib.import_module("gen_readonly")
        sent = []

        class T:
            def call(self, method, params):
                sent.append((method, params))
                return {"ok": True}

        client = mod.RepoReadClient(T())
        assert not hasattr(client, "grep")  # not in the readonly profile
        client.read_file(path="src/a.py", max_bytes=10)
        client.list_tree()
        for method, params in sent:
            assert reg.validate_request(method, params) == []
        import typing
        hints = typing.get_type_hints(mod.RepoReadClient.read_file)
        assert hints["path"] is str
    finally:
        sys.path.remove(str(tmp_path))


def test_unknown_tool_or_profile_is_a_usage_error(tmp_path: Path) -> None:
    proc = dome_cli("registry", "gen-client", "--tool", "nope", "--profile", "default", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "UNKNOWN_TOOL" in proc.stderr


# ---------------------------------------------------------------- pins and releases
def _registry_repo(git_repo: Path) -> Path:
    shutil.copytree(REGISTRY_ROOT / "tools" / "repo_read", git_repo / "registry" / "tools" / "repo_read")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "-m", "registry: repo_read 1.0.0")
    return git_repo


def test_pins_must_be_full_commit_shas() -> None:
    assert parse_pin("repo_read@" + "a" * 40).commit == "a" * 40
    for bad in ("repo_read@main", "repo_read@abc1234", "repo_read@registry/repo_read/v1.0.0", "repo_read@HEAD"):
        with pytest.raises(PinNotImmutable):
            parse_pin(bad)


def test_release_tags_resolve_to_pins_and_never_move(git_repo: Path) -> None:
    repo = _registry_repo(git_repo)
    head = git(repo, "rev-parse", "HEAD")
    tag, pin = registry_git.tag_release(repo, "repo_read")
    assert tag == "registry/repo_read/v1.0.0" and str(pin) == f"repo_read@{head}"
    assert registry_git.resolve_release(repo, "repo_read", "1.0.0") == pin
    resolved = registry_git.resolve_pin(repo, str(pin))
    assert resolved.version == "1.0.0" and resolved.contract["contract_id"] == "dome.repo_read"
    # a later commit changes the contract: the old pin still reads the old bytes
    contract = repo / "registry/tools/repo_read/spec/contract.json"
    _edit(contract, lambda d: d.__setitem__("description", "changed"))
    git(repo, "commit", "-qam", "change")
    assert registry_git.resolve_pin(repo, str(pin)).contract["description"] != "changed"
    with pytest.raises(registry_git.ReleaseExists):
        registry_git.tag_release(repo, "repo_read")  # v1.0.0 would move: refused
    with pytest.raises(registry_git.ReleaseVersionMismatch):
        registry_git.tag_release(repo, "repo_read", version="1.1.0")
    _edit(contract, lambda d: d.__setitem__("version", "1.1.0"))
    git(repo, "commit", "-qam", "1.1.0")
    registry_git.tag_release(repo, "repo_read")
    assert [v for _, v, _ in registry_git.list_releases(repo, "repo_read")] == ["1.0.0", "1.1.0"]
    with pytest.raises(registry_git.PinNotFound):
        registry_git.resolve_pin(repo, "repo_read@" + "0" * 40)
    proc = dome_cli("registry", "resolve", "--repo", str(repo), "--tool", "repo_read", "--version", "1.0.0")
    assert proc.stdout.strip() == str(pin)
    proc = dome_cli("registry", "resolve", "--repo", str(repo), "--pin", "repo_read@main")
    assert proc.returncode == 2 and "PIN_NOT_IMMUTABLE" in proc.stderr
