"""Adversarial inputs: paths are absolute and validated, symlinks cannot escape
the allowed roots, script paths and parameters are data and never executed."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .helpers import expect_code

EVIL = ["$(touch {d}/PWNED_subst)", "`touch {d}/PWNED_tick`", "; touch {d}/PWNED_semi", "| touch {d}/PWNED_pipe",
        "#{{system('touch {d}/PWNED_ruby')}}", "&& touch {d}/PWNED_and", "\"'\\ * ? ~ > <"]


def _pwned(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("PWNED"))


def test_paths_must_be_absolute(tools, kl_env, monkeypatch) -> None:
    monkeypatch.chdir(kl_env["fixtures"])
    e = expect_code("INVALID_TARGET", tools.open_layout, {"path": "chip.gds"})
    assert e.details["reason"] == "not_absolute"
    sid = tools.open(kl_env["gds"])["session_id"]
    e = expect_code("INVALID_TARGET", tools.run_drc_script, {"session_id": sid, "script_path": "deck.py"})
    assert e.details["reason"] == "not_absolute"
    expect_code("INVALID_TARGET", tools.open_layout, {"path": str(kl_env["gds"]) + "\n/etc/passwd"})


def test_paths_outside_the_allowed_roots_are_refused(tools, kl_env, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.gds"
    secret.write_bytes(kl_env["gds"].read_bytes())
    e = expect_code("PATH_OUTSIDE_ROOTS", tools.open, secret)
    assert e.details["reason"] == "outside_allowed_roots"
    dotdot = str(kl_env["allowed"]) + "/../outside/secret.gds"
    expect_code("PATH_OUTSIDE_ROOTS", tools.open_layout, {"path": dotdot})


def test_symlink_escaping_the_roots_is_refused(tools, kl_env, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.gds").write_bytes(kl_env["gds"].read_bytes())
    (outside / "evil.py").write_text("def run(deck):\n    open('/tmp/should_not_run', 'w')\n")
    link = kl_env["allowed"] / "innocent.gds"
    link.symlink_to(outside / "secret.gds")
    e = expect_code("PATH_OUTSIDE_ROOTS", tools.open, link)
    assert "resolved" not in e.details and str(outside) not in str(e.to_object())  # the target is not echoed
    dir_link = kl_env["allowed"] / "decks"
    dir_link.symlink_to(outside, target_is_directory=True)
    sid = tools.open(kl_env["gds"])["session_id"]
    expect_code("PATH_OUTSIDE_ROOTS", tools.run_drc_script, {"session_id": sid, "script_path": str(dir_link / "evil.py")})
    # a symlink that stays inside the roots is fine
    ok = kl_env["allowed"] / "alias.gds"
    ok.symlink_to(kl_env["gds"])
    assert tools.open(ok)["source"]["path"] == str(kl_env["gds"].resolve())


def test_ruby_script_path_and_params_with_shell_metacharacters_are_data(tools, kl_env, tmp_path) -> None:
    d = kl_env["allowed"]
    # KLAYOUT_BIN is honoured: a wrapper that records its argv, then runs the real klayout
    wrapper = tmp_path / "klayout-wrapper"
    wrapper.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {d}/wrapper_argv.txt\nexec /usr/bin/klayout \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    os.environ["KLAYOUT_BIN"] = str(wrapper)
    try:
        deck = d / "deck $(touch PWNED_name) `id` ; x.drc"
        deck.write_text("source($input, $top_cell)\nreport('echo', $output)\n"
                        "File.write(File.join(File.dirname($output), 'echo.txt'), $evil)\n"
                        "input(2, 0).width(0.2).output('w')\n")
        evil = " ".join(EVIL).format(d=d)
        sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
        r = tools.run_drc_script({"session_id": sid, "script_path": str(deck), "script_type": "ruby",
                                  "params": {"evil": evil}})
    finally:
        del os.environ["KLAYOUT_BIN"]
    run_dir = Path(r["artifacts"][0]["path"]).parent
    assert (run_dir / "echo.txt").read_text() == evil  # arrived verbatim, as a string
    assert r["marker_count"] == 1 and r["script_path"] == str(deck)
    assert _pwned(d) == [] and _pwned(run_dir) == []
    argv = (d / "wrapper_argv.txt").read_text().splitlines()
    assert argv[:3] == ["-b", "-r", str(deck)] and f"evil={evil}" in argv


def test_python_params_are_data_and_the_child_env_is_minimal(tools, kl_env, monkeypatch) -> None:
    d = kl_env["allowed"]
    monkeypatch.setenv("DOME_TEST_SECRET", "s3cr3t")
    deck = d / "echo.py"
    deck.write_text("import json, os\ndef run(deck):\n"
                    "    print(json.dumps({'params': deck.params, 'env': sorted(os.environ)}))\n"
                    "    deck.output(deck.input(2, 0).width_check(deck.um(0.2)), 'w')\n")
    evil = " ".join(EVIL).format(d=d)
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    r = tools.run_drc_script({"session_id": sid, "script_path": str(deck), "params": {"evil": evil}})
    import json
    out = json.loads(Path(r["artifacts"][3]["path"]).read_text())
    assert out["params"] == {"evil": evil}
    assert "DOME_TEST_SECRET" not in out["env"]
    assert _pwned(d) == []


def test_bad_parameter_names_and_reserved_names_are_refused(tools, kl_env) -> None:
    deck = kl_env["allowed"] / "p.py"
    deck.write_text("def run(deck):\n    pass\n")
    sid = tools.open(kl_env["gds"])["session_id"]
    for params in ({"a;b": "1"}, {"$(x)": "1"}, {"-rd": "1"}, {"output": "/etc/passwd"}, {"input": "/etc/x.gds"},
                   {"ok": "nul\x00byte"}):
        expect_code("INVALID_TARGET", tools.run_drc_script, {"session_id": sid, "script_path": str(deck),
                                                             "params": params})
    assert not (kl_env["allowed"] / "PWNED").exists()


def test_outside_the_roots_existence_is_not_revealed_and_install_paths_not_exposed(tools, kl_env, tmp_path) -> None:
    """A path outside the allowed roots gets one answer whether or not it exists; details name no install folder."""
    from worker_sdk.klayout_tools.config import BUILTIN_DECKS

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "real.gds").write_bytes(kl_env["gds"].read_bytes())
    answers = []
    for name in ("real.gds", "missing.gds"):
        e = expect_code("PATH_OUTSIDE_ROOTS", tools.open_layout, {"path": str(outside / name)})
        obj = e.to_object()
        answers.append((obj["code"], obj["message"], obj["details"]["reason"], obj["details"]["allowed_roots"]))
        assert str(BUILTIN_DECKS) not in json.dumps(obj) and "site-packages" not in json.dumps(obj)
    assert answers[0] == answers[1]
    # a symlink inside the roots pointing at a missing file outside is still "outside", not "missing"
    (kl_env["allowed"] / "dangling.gds").symlink_to(outside / "nothing-here.gds")
    expect_code("PATH_OUTSIDE_ROOTS", tools.open_layout, {"path": str(kl_env["allowed"] / "dangling.gds")})
    # inside the roots a missing file is FILE_NOT_FOUND, as the contract says
    expect_code("FILE_NOT_FOUND", tools.open_layout, {"path": str(kl_env["allowed"] / "missing.gds")})
