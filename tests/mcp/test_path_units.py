"""registry.pathpolicy and coordinator.mcp.paths: the decisions, without a host."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from registry.pathpolicy import (NotADeck, PathExists, PathOutsideRoots, PathPolicy, SecretInRoot, apply,
                                 client_folder, reserve)


def policy(tmp_path: Path) -> PathPolicy:
    for d in ("r", "w", "d", "x"):
        (tmp_path / d).mkdir(exist_ok=True)
    return PathPolicy.of(read=[tmp_path / "r"], write=[tmp_path / "w"], decks=[tmp_path / "d"])


def test_reads_writes_and_decks_stay_in_their_roots(tmp_path) -> None:
    p = policy(tmp_path)
    (tmp_path / "r" / "a.gds").write_text("x")
    assert p.read(str(tmp_path / "r" / "a.gds"), field="layout") == (tmp_path / "r" / "a.gds").resolve()
    assert p.read(str(tmp_path / "w" / "new"), field="layout")  # what may be written may be read back
    for bad in (str(tmp_path / "x" / "a"), str(tmp_path / "r" / ".." / "x" / "a"), "relative.gds", "/etc/passwd",
                str(tmp_path / "r" / "a\nb")):
        with pytest.raises(PathOutsideRoots):
            p.read(bad, field="layout")
    with pytest.raises(PathOutsideRoots):
        p.write(str(tmp_path / "r" / "out.gds"), field="out")  # readable is not writable
    assert p.write("sub/out.gds", field="out", base=tmp_path / "w" / "me") == (tmp_path / "w" / "me" / "sub" / "out.gds")
    with pytest.raises(PathOutsideRoots):
        p.write("../../x/out.gds", field="out", base=tmp_path / "w" / "me")
    with pytest.raises(PathOutsideRoots):
        p.deck(str(tmp_path / "r" / "deck.drc"), field="script_path", script_type=None)
    with pytest.raises(NotADeck):
        p.deck(str(tmp_path / "d" / "notes.txt"), field="script_path", script_type="python")


def test_overwrite_needs_the_flag_and_a_regular_file(tmp_path) -> None:
    p = policy(tmp_path)
    old = tmp_path / "w" / "m.gds"
    old.write_text("old")
    with pytest.raises(PathExists):
        p.write(str(old), field="out")
    assert p.write(str(old), field="out", overwrite=True) == old.resolve()
    (tmp_path / "w" / "dir.gds").mkdir()
    with pytest.raises(PathExists):
        p.write(str(tmp_path / "w" / "dir.gds"), field="out", overwrite=True)
    (tmp_path / "w" / "dangling.gds").symlink_to(tmp_path / "w" / "nowhere.gds")
    with pytest.raises(PathExists):  # writing through a dangling link is still writing over something
        p.write(str(tmp_path / "w" / "dangling.gds"), field="out")


def test_apply_checks_every_field_and_the_png_beside_a_mask(tmp_path) -> None:
    p = policy(tmp_path)
    (tmp_path / "r" / "a.glp").write_text("x")
    (tmp_path / "w" / "m.png").write_text("an earlier preview")
    args = {"layout": str(tmp_path / "r" / "a.glp"), "out": str(tmp_path / "w" / "m.gds"), "iterations": 1}
    with pytest.raises(PathExists):
        apply(p, "optimize", args)
    out, new = apply(p, "optimize", {**args, "overwrite": True})
    assert "overwrite" not in out and new == [(tmp_path / "w" / "m.gds").resolve(), (tmp_path / "w" / "m.png").resolve()]
    assert apply(p, "query_region", {"session_id": "s"}) == ({"session_id": "s"}, [])


def test_an_output_folder_stays_in_the_write_roots_and_keeps_its_files(tmp_path) -> None:
    p = policy(tmp_path)
    (tmp_path / "r" / "a.glp").write_text("x")
    sim = {"layout": str(tmp_path / "r" / "a.glp"), "out_dir": str(tmp_path / "x" / "prints")}
    with pytest.raises(PathOutsideRoots):
        apply(p, "simulate", sim)
    prints = tmp_path / "w" / "prints"
    prints.mkdir()
    (prints / "print_nominal.png").write_text("earlier")
    with pytest.raises(PathExists):
        apply(p, "simulate", {**sim, "out_dir": str(prints)})
    assert apply(p, "simulate", {**sim, "out_dir": str(prints), "overwrite": True})[0]["out_dir"] == str(prints)
    with pytest.raises(PathOutsideRoots):  # the tiling journal of optimize too
        apply(p, "optimize", {"layout": sim["layout"], "tiling": {"dir": str(tmp_path / "r" / "tiles")}})


def test_reserve_refuses_a_file_or_link_planted_after_the_check(tmp_path) -> None:
    target = tmp_path / "w" / "late.gds"
    target.parent.mkdir()
    target.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PathExists):
        reserve(target, overwrite=False)
    with pytest.raises(PathOutsideRoots):
        reserve(target, overwrite=True)  # O_NOFOLLOW
    assert not (tmp_path / "elsewhere").exists()


def test_secrets_in_a_root_stop_the_host(tmp_path) -> None:
    from coordinator.mcp.paths import check_secrets, host_policy

    ops = tmp_path / "ops"
    check_secrets(host_policy(ops, {"DOME_MCP_READ_ROOTS": str(tmp_path / "data")}), ops)
    for env in ({"DOME_MCP_READ_ROOTS": str(tmp_path)}, {"KLAYOUT_MCP_ALLOWED_ROOTS": str(ops / "keys")},
                {"DOME_MCP_DECK_ROOTS": str(tmp_path)}):
        with pytest.raises(SecretInRoot):
            check_secrets(host_policy(ops, env), ops)


def test_the_token_file_checks(tmp_path) -> None:
    from coordinator.mcp.paths import token_file_problem

    f = tmp_path / "t"
    f.write_text("x")
    f.chmod(0o600)
    tmp_path.chmod(0o700)
    uid = os.geteuid()
    assert token_file_problem(f.stat(), tmp_path.stat(), uid) is None
    assert token_file_problem(f.stat(), tmp_path.stat(), uid + 1) == "wrong_owner"
    f.chmod(0o644)
    assert token_file_problem(f.stat(), tmp_path.stat(), uid) == "readable_by_others"
    f.chmod(0o600)
    tmp_path.chmod(0o777)
    assert token_file_problem(f.stat(), tmp_path.stat(), uid) == "folder_writable_by_others"
    tmp_path.chmod(0o700)
    assert stat.S_ISREG(f.stat().st_mode)


def test_worker_env_drops_secrets_and_client_folders_are_one_component() -> None:
    from coordinator.mcp.worker_sandbox import worker_env

    env = worker_env({"DOME_MCP_TOKEN": "t", "OPENAI_API_KEY": "k", "GH_TOKEN": "g", "PATH": "/bin",
                      "DOME_MCP_TEST_TOOLS": "1"})
    assert env == {"PATH": "/bin", "DOME_MCP_TEST_TOOLS": "1"}
    assert client_folder("../../etc") == "_.._etc" and "/" not in client_folder("a/b") and client_folder("") == "anonymous"
