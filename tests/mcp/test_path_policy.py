"""The agent door without keys: paths, decks and secrets, attacked through the real MCP SDK client.

Every attack runs over stdio and over HTTP against a `dome mcp` subprocess, as a remote agent
would: a write outside the roots, an overwrite without `overwrite`, a symlink and `..` in an
output path, a read outside the read roots, a non-deck file and a Python file given to
run_drc_script (on an observer-only door and on a full one), a root holding the host's token,
a planted 0644 token file, the token in a worker's environment, and a worker tool writing
outside the policy. Each must be refused with its code, with nothing written, nothing run and
no secret in the answer.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.attacks import attack
from tests.conftest import REPO_ROOT, dome_cli, git, make_repo

from .conftest import host_env, http_host, job_files, process_descendants, two_bars_gds

pytestmark = pytest.mark.anyio
DOORS = ["stdio", "http"]
TOKEN = "path-policy-token-0123456789"
SECRET = "SECRET_VALUE_do_not_leak_4242"


@asynccontextmanager
async def door(kind: str, ops_root: Path, env: dict[str, str], *args: str) -> AsyncIterator[Client]:
    """A real SDK client on a `dome mcp` subprocess, over stdio or streamable HTTP."""
    if kind == "stdio":
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "coordinator.cli.main", "mcp", "--ops-root", str(ops_root), *args],
                                       env=host_env(ops_root, **env), cwd=str(REPO_ROOT))
        async with Client(params, mode="legacy", cache=None) as client:
            yield client
        return
    with http_host(ops_root, TOKEN, extra_env=env, extra_args=args) as url:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as client:
                yield client


@pytest.fixture
def site(tmp_path: Path, iccad13: Path) -> dict[str, Path]:
    """ops root, a read root with a layout and decks, an outside folder with a precious file."""
    ops, inside, outside = tmp_path / "ops", tmp_path / "in", tmp_path / "outside"
    for d in (ops, inside, outside):
        d.mkdir()
    two_bars_gds(inside / "bars.gds")
    (outside / "precious.gds").write_bytes(b"precious bytes")
    (outside / "secret.glp").write_bytes((iccad13 / "layouts" / "M1_test1.glp").read_bytes())
    (inside / ".env").write_text(f"API_TOKEN={SECRET}\n")
    (inside / "topcode.py").write_text(f"open({str(outside / 'RAN')!r}, 'w').write('x')\n"
                                       "def run(deck):\n    pass\n")
    art = ops / "mcp" / "artifacts" / "local"
    art.mkdir(parents=True)
    return {"ops": ops, "in": inside, "outside": outside, "art": art, "glp": iccad13 / "layouts" / "M1_test1.glp",
            "iccad13": iccad13}


def roots(site: dict[str, Path]) -> dict[str, str]:
    return {"DOME_MCP_READ_ROOTS": f"{site['in']}{os.pathsep}{site['iccad13']}"}


def refused(res, code: str) -> dict:
    assert res.is_error, res.content[0].text
    obj = res.structured_content
    assert obj["code"] == code, obj
    assert SECRET not in json.dumps(obj) and SECRET not in res.content[0].text
    return obj


def outside_untouched(site: dict[str, Path]) -> None:
    assert sorted(p.name for p in site["outside"].iterdir()) == ["precious.gds", "secret.glp"]
    assert (site["outside"] / "precious.gds").read_bytes() == b"precious bytes"


@attack("mcp-path-escape")
@pytest.mark.parametrize("kind", DOORS)
async def test_optimize_cannot_write_outside_the_roots(kind, site) -> None:
    async with door(kind, site["ops"], roots(site)) as c:
        res = await c.call_tool("optimize", {"layout": str(site["glp"]), "iterations": 1,
                                             "out": str(site["outside"] / "precious.gds")})
        obj = refused(res, "PATH_OUTSIDE_ROOTS")
        assert obj["details"]["access"] == "write" and obj["details"]["field"] == "out"
    outside_untouched(site)


@attack("mcp-path-escape")
@pytest.mark.parametrize("kind", DOORS)
async def test_an_existing_artifact_is_not_overwritten_without_overwrite(kind, site) -> None:
    mine = site["art"] / "mask.gds"
    mine.write_bytes(b"earlier mask")
    async with door(kind, site["ops"], roots(site)) as c:
        res = await c.call_tool("optimize", {"layout": str(site["glp"]), "iterations": 1, "out": str(mine)})
        refused(res, "PATH_EXISTS")
    assert mine.read_bytes() == b"earlier mask" and not (site["art"] / "mask.png").exists()


@attack("mcp-path-escape")
@pytest.mark.parametrize("kind", DOORS)
async def test_a_symlink_or_dotdot_in_the_out_path_cannot_lead_outside(kind, site) -> None:
    (site["art"] / "link").symlink_to(site["outside"], target_is_directory=True)
    dotdot = str(site["art"]) + "/../../../../outside/new.gds"
    async with door(kind, site["ops"], roots(site)) as c:
        for out in (str(site["art"] / "link" / "new.gds"), dotdot):
            res = await c.call_tool("optimize", {"layout": str(site["glp"]), "iterations": 1, "out": out})
            refused(res, "PATH_OUTSIDE_ROOTS")
        # a link planted at the output name itself (pointing outside) is refused too
        (site["art"] / "planted.gds").symlink_to(site["outside"] / "precious.gds")
        res = await c.call_tool("optimize", {"layout": str(site["glp"]), "iterations": 1,
                                             "out": str(site["art"] / "planted.gds"), "overwrite": True})
        refused(res, "PATH_OUTSIDE_ROOTS")
    outside_untouched(site)


@attack("mcp-path-escape")
@pytest.mark.parametrize("kind", DOORS)
async def test_a_read_outside_the_read_roots_is_refused(kind, site) -> None:
    async with door(kind, site["ops"], roots(site)) as c:
        res = await c.call_tool("evaluate", {"layout": str(site["outside"] / "secret.glp")})
        obj = refused(res, "PATH_OUTSIDE_ROOTS")
        assert obj["details"]["access"] == "read" and str(site["outside"]) not in json.dumps(obj)
        res = await c.call_tool("open_layout", {"path": str(site["outside"] / "precious.gds")})
        refused(res, "PATH_OUTSIDE_ROOTS")
        res = await c.call_tool("run_submit", {"work_queue": str(site["outside"] / "precious.gds"),
                                               "idempotency_key": "outside-1"})
        refused(res, "PATH_OUTSIDE_ROOTS")


def _repo_queues(site: dict[str, Path]) -> tuple[Path, dict[str, Path]]:
    """A git repository outside the roots, and queues inside a read root that reach it: by an absolute
    path, by `..` from the queue's folder, and by a symlink inside the root."""
    elsewhere = make_repo(site["ops"].parent / "elsewhere" / "repo")
    (site["in"] / "link").symlink_to(elsewhere)
    q = {**json.loads((REPO_ROOT / "examples" / "hello.queue.json").read_text()),
         "promote_to": "refs/heads/dome/agents/repo-escape"}
    queues = {}
    for name, repo in (("absolute", str(elsewhere)), ("dotdot", "../elsewhere/repo"), ("symlink", "link")):
        queues[name] = site["in"] / f"{name}.queue.json"
        queues[name].write_text(json.dumps({**q, "repo": repo}))
    return elsewhere, queues


@attack("mcp-run-repo-outside")
@pytest.mark.parametrize("kind", DOORS)
async def test_run_submit_refuses_a_repository_outside_the_read_roots(kind, site) -> None:
    elsewhere, queues = _repo_queues(site)
    refs = git(elsewhere, "for-each-ref")
    async with door(kind, site["ops"], roots(site)) as c:
        for name, queue in queues.items():
            res = await c.call_tool("run_submit", {"work_queue": str(queue), "idempotency_key": f"repo-{name}-1"})
            obj = refused(res, "PATH_OUTSIDE_ROOTS")
            assert obj["details"]["field"] == "work_queue.repo" and obj["details"]["access"] == "read", name
            assert os.path.realpath(site["in"]) in obj["details"]["roots"], obj  # the root set it left
            assert str(elsewhere) not in json.dumps(obj), name
    # no run started, nothing written: no run folder, no job, the repository as it was
    assert not (site["ops"] / "runs").exists() and job_files(site["ops"]) == []
    assert git(elsewhere, "for-each-ref") == refs and git(elsewhere, "worktree", "list").count("\n") <= 1


@attack("mcp-run-repo-outside")
def test_dome_run_checks_the_queue_it_loads_against_the_read_roots(site) -> None:
    """The door's `dome run --read-roots` checks the queue and repository it loads itself, so a queue
    swapped after the host's check still cannot reach a repository outside the roots."""
    elsewhere, queues = _repo_queues(site)
    ops = site["ops"] / "cli"
    for name, queue in queues.items():
        r = dome_cli("run", str(queue), f"--read-roots={site['in']}", "--ops-root", str(ops), "--json", timeout=120)
        err = json.loads(r.stdout)["error"]
        assert r.returncode == 2 and err["code"] == "PATH_OUTSIDE_ROOTS", (name, r.stdout, r.stderr)
        assert err["details"]["field"] == "work_queue.repo", name
    r = dome_cli("run", str(queues["absolute"]), f"--read-roots={elsewhere.parent}", "--ops-root", str(ops),
                 "--json", timeout=120)
    assert json.loads(r.stdout)["error"]["details"]["field"] == "work_queue"  # the queue file itself is outside
    assert not ops.exists()


@attack("mcp-deck-as-read")
@pytest.mark.parametrize("kind", DOORS)
async def test_an_observer_door_runs_no_deck(kind, site) -> None:
    env = {**roots(site), "DOME_MCP_DECK_ROOTS": str(site["in"])}
    async with door(kind, site["ops"], env, "--allow", "read") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "run_drc_script" not in names and "open_layout" in names
        sid = (await c.call_tool("open_layout", {"path": str(site["in"] / "bars.gds")})).structured_content["session_id"]
        for deck in (site["in"] / ".env", site["in"] / "topcode.py"):
            with pytest.raises(MCPError) as e:
                await c.call_tool("run_drc_script", {"session_id": sid, "script_path": str(deck),
                                                     "script_type": "python"})
            assert e.value.error.data["code"] == "UNKNOWN_TOOL" and SECRET not in str(e.value)
    assert not (site["outside"] / "RAN").exists()


@attack("mcp-deck-as-read")
@pytest.mark.parametrize("kind", DOORS)
async def test_a_file_that_is_not_a_deck_is_neither_run_nor_echoed(kind, site) -> None:
    env = {**roots(site), "DOME_MCP_DECK_ROOTS": str(site["in"])}
    async with door(kind, site["ops"], env) as c:
        sid = (await c.call_tool("open_layout", {"path": str(site["in"] / "bars.gds")})).structured_content["session_id"]
        for deck, kind_ in ((site["in"] / ".env", "ruby"), (site["in"] / ".env", "python"),
                            (site["in"] / "topcode.py", "python")):
            res = await c.call_tool("run_drc_script", {"session_id": sid, "script_path": str(deck),
                                                       "script_type": kind_})
            refused(res, "NOT_A_DECK")
        # a deck outside the deck roots is not run either, even where it may be read
        res = await c.call_tool("run_drc_script", {"session_id": sid, "script_path": str(site["glp"]),
                                                   "script_type": "ruby"})
        refused(res, "PATH_OUTSIDE_ROOTS")
    assert not (site["outside"] / "RAN").exists()


@attack("mcp-secret-in-root")
@pytest.mark.parametrize("kind", DOORS)
def test_a_host_whose_root_holds_its_token_does_not_start(kind, tmp_path) -> None:
    ops = tmp_path / "ops"
    (ops / "mcp").mkdir(parents=True)
    argv = [sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(ops)]
    argv += ["--http", "127.0.0.1:0"] if kind == "http" else []
    for env in ({"DOME_MCP_READ_ROOTS": str(tmp_path)}, {"KLAYOUT_MCP_ALLOWED_ROOTS": str(ops / "mcp")},
                {"DOME_MCP_WRITE_ROOTS": str(tmp_path)}):
        r = subprocess.run(argv, cwd=REPO_ROOT, env={**host_env(ops), **env}, input=b"", capture_output=True,
                           timeout=60)
        assert r.returncode == 2 and b"SECRET_IN_ROOT" in r.stderr, (env, r.stderr[-500:])
    assert not (ops / "mcp" / "http.token").exists()


@attack("mcp-token-file")
def test_a_planted_token_file_is_refused(tmp_path) -> None:
    ops = tmp_path / "ops"
    (ops / "mcp").mkdir(parents=True)
    token = ops / "mcp" / "http.token"
    argv = [sys.executable, "-m", "coordinator.cli.main", "mcp", "--ops-root", str(ops), "--http", "127.0.0.1:0"]
    env = {k: v for k, v in host_env(ops).items() if k != "DOME_MCP_TOKEN"}
    token.write_text("planted-by-someone-else")
    token.chmod(0o644)
    real = tmp_path / "elsewhere.token"
    real.write_text("planted-by-someone-else")
    real.chmod(0o600)
    for plant in ("0644", "symlink"):
        if plant == "symlink":
            token.unlink()
            token.symlink_to(real)
        r = subprocess.run(argv, cwd=REPO_ROOT, env=env, input=b"", capture_output=True, timeout=60)
        assert r.returncode == 2 and b"TOKEN_FILE_UNSAFE" in r.stderr, (plant, r.stderr[-500:])
        assert b"planted-by-someone-else" not in r.stderr


def test_a_new_token_file_is_0600_in_a_0700_folder_and_holds_only_a_hash(tmp_path) -> None:
    from coordinator.mcp.identity import token_digest
    from coordinator.mcp.paths import operator_token_digest

    state = tmp_path / "ops" / "mcp"
    shown: list[str] = []
    digest = operator_token_digest(state, announce=shown.append)
    (line,) = shown
    token = line.rsplit(" ", 1)[1]
    assert len(token) >= 32 and token_digest(token) == digest
    assert operator_token_digest(state, announce=shown.append) == digest and len(shown) == 1  # shown once
    assert (state / "http.token").read_text() == f"sha256:{digest}\n"
    assert (state / "http.token").stat().st_mode & 0o777 == 0o600 and state.stat().st_mode & 0o777 == 0o700


def test_a_plain_token_file_that_cannot_be_rewritten_is_refused_with_what_to_do(tmp_path) -> None:
    from coordinator.mcp.paths import TokenFilePlain, operator_token_digest

    state = tmp_path / "ops" / "mcp"
    state.mkdir(parents=True, mode=0o700)
    (state / "http.token").write_text("plain-token-of-an-older-dome")
    (state / "http.token").chmod(0o600)
    (state / f".http.token.{os.getpid()}.tmp").mkdir()  # the rewrite's scratch name is taken: it cannot write
    with pytest.raises(TokenFilePlain) as e:
        operator_token_digest(state, announce=lambda line: None)
    assert "remove" in " ".join(e.value.hints) and e.value.code == "TOKEN_FILE_PLAIN"
    assert "plain-token-of-an-older-dome" not in json.dumps(e.value.details)


async def _calls_as(url: str, token: str) -> bool:
    """Whether a real SDK client holding `token` is served (False: the door answered 401)."""
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as c:
                return not (await c.call_tool("health", {})).is_error
    except Exception as exc:  # noqa: BLE001 - the SDK raises on a 401 (its exception type varies)
        assert "401" in repr(exc) or "Unauthorized" in repr(exc) or isinstance(exc, (MCPError, ExceptionGroup)), exc
        return False


@attack("mcp-token-file")
async def test_the_operator_token_file_keeps_only_a_hash(tmp_path) -> None:
    """Whoever reads http.token learns nothing to call with: the door shows its new token once (stderr);
    the file keeps its SHA-256, and that digest is no bearer token."""
    ops = tmp_path / "ops"
    with http_host(ops, None, stderr=tmp_path / "door.err") as url:
        lines = [ln for ln in (tmp_path / "door.err").read_text().splitlines() if "new operator token" in ln]
        token = lines[0].rsplit(" ", 1)[1]
        held = (ops / "mcp" / "http.token").read_text()
        assert token not in held and held.startswith("sha256:")
        assert await _calls_as(url, token)
        assert not await _calls_as(url, held.strip()) and not await _calls_as(url, held.strip()[7:])


@attack("mcp-token-file")
async def test_a_plain_token_file_of_an_older_dome_is_rehashed_on_start(tmp_path) -> None:
    ops = tmp_path / "ops"
    (ops / "mcp").mkdir(parents=True, mode=0o700)
    old = ops / "mcp" / "http.token"
    old.write_text("plain-token-of-an-older-dome-0123456789")
    old.chmod(0o600)
    with http_host(ops, None, stderr=tmp_path / "door.err") as url:
        assert await _calls_as(url, "plain-token-of-an-older-dome-0123456789")  # the operator's token still works
        assert "plain-token-of-an-older-dome" not in old.read_text() and old.read_text().startswith("sha256:")
        assert old.stat().st_mode & 0o777 == 0o600
        assert "plain-token-of-an-older-dome" not in (tmp_path / "door.err").read_text()
        assert not await _calls_as(url, old.read_text().strip())


@attack("mcp-token-file")
async def test_the_token_never_reaches_a_worker(site) -> None:
    async with door("http", site["ops"], roots(site)) as c:
        assert not (await c.call_tool("test_echo", {"value": 1})).is_error  # a worker is running
        pid = (await c.call_tool("health", {})).structured_content["worker_pid"]
        tree = [pid] + process_descendants(pid)
        environs = [Path(f"/proc/{p}/environ").read_bytes() for p in tree if Path(f"/proc/{p}/environ").exists()]
        assert environs and not any(TOKEN.encode() in e or b"DOME_MCP_TOKEN" in e for e in environs)


@attack("mcp-path-escape")
async def test_a_worker_tool_cannot_write_outside_the_policy(site) -> None:
    """The sandbox: a tool with a bug (here a test tool that writes where it is told) stays inside."""
    async with door("stdio", site["ops"], roots(site)) as c:
        res = await c.call_tool("test_slow", {"steps": 1, "step_s": 0.0, "heartbeat": str(site["outside"] / "hb")})
        assert res.is_error
        ok = await c.call_tool("test_slow", {"steps": 1, "step_s": 0.0, "heartbeat": str(site["art"] / "hb")})
        assert not ok.is_error, ok.content[0].text
    outside_untouched(site)
    assert (site["art"] / "hb").read_text() == "0"


@pytest.mark.slow
async def test_a_relative_output_lands_in_the_clients_folder_and_comes_back_as_a_resource(site) -> None:
    """A remote agent never needs a host path: it names a file, gets a link, reads the bytes."""
    async with door("stdio", site["ops"], roots(site)) as c:
        res = await c.call_tool("optimize", {"layout": str(site["glp"]), "iterations": 1, "out": "masks/m1.png"},
                                read_timeout_seconds=600)
        assert not res.is_error, res.content[0].text
        # the client's own folder: the stdio door names its client by the process that started it
        written = Path(res.structured_content["mask"]["path"])
        folder, *rest = written.relative_to((site["ops"] / "mcp" / "artifacts").resolve()).parts
        assert folder.startswith("stdio_") and rest == ["masks", "m1.png"] and written.stat().st_size > 0
        (link,) = [x for x in res.content if x.type == "resource_link"]
        assert str(link.uri) == f"dome://artifacts/mcp/artifacts/{folder}/masks/m1.png"
        read = await c.read_resource(link.uri)
        import base64

        assert base64.b64decode(read.contents[0].blob) == written.read_bytes()
        again = await c.call_tool("optimize", {"layout": str(site["glp"]), "iterations": 1, "out": "masks/m1.png"})
        refused(again, "PATH_EXISTS")
