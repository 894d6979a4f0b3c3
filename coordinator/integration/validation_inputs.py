"""What a validation suite reads besides the code it judges, and the base's copy of it.

A suite's *inputs* are the files that decide what "passed" means: its tests,
fixtures, test-runner configuration, the decks and scripts it runs. A change
that rewrites them could make a broken head pass, so the evidence that judges
a change is taken from outside the change: the run's base.

A suite's inputs are the union of (`suite_inputs`, pure):
- the globs its work-queue entry declares under `inputs`;
- for a pytest-like command (a word `pytest` or `py.test`, as a program or
  after `-m`, in its argv or in a shell string of its argv): `PYTEST_INPUTS`;
- every path its argv names (shell strings split as a shell would,
  `named_paths`): a relative word ending in a script, deck or configuration
  suffix, or a relative word with a `/` standing as the program or as the
  script of an interpreter (`sh .ci/run`); the path and everything under it;
- a domain suite's `deck`, `decks`, `script`, `scripts` and `rules`
  parameters (not `builtin:` ones), each with everything under it;
- what the repository lists in `.dome/validation-inputs` at the run's base
  (one glob per line, `#` comments), for every suite.
Globs match as `policy.path_matches` does (fnmatch; `*` crosses `/`; a
leading `**/` also matches at the top).

The rule (`changed_inputs`, pure): a proposal that adds files only is judged
by the base's inputs and its own with no consent asked; one that modifies,
removes or renames away a file that is an input at its base is risk high and
needs consent. Every required suite whose inputs the head changed also runs
on the head with the base's inputs put back (`base_inputs_tree`): that report
says which inputs came from which commit and the tree it judged, and
`dome verify` rebuilds that tree. A policy opts out with
`validation_inputs_from: "head"`.
"""
from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from registry.diffs import ParsedDiff

from .policy import globs_matcher, parse_protected_file

REPO_INPUTS_FILE = ".dome/validation-inputs"
PYTEST_INPUTS = ("tests/**", "test/**", "testing/**", "**/test_*.py", "**/*_test.py", "**/conftest.py",
                 "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", ".coveragerc")
"""What pytest reads besides the code: test trees, test modules anywhere, conftest files and every
file that can hold its configuration (the whole file counts, not only its pytest section)."""
SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".rb", ".pl", ".js", ".tcl", ".drc", ".lydrc", ".lym", ".mk",
                   ".ini", ".toml", ".cfg")
"""A word ending so names a script, a deck or a configuration file wherever it stands."""
INTERPRETERS = frozenset({"sh", "bash", "dash", "zsh", "python", "python3", "ruby", "perl", "node", "tclsh"})
SHELL_SEPARATORS = frozenset({"&&", "||", ";", "|"})
DECK_KEYS = ("deck", "decks", "script", "scripts", "rules")
PYTEST_WORDS = frozenset({"pytest", "py.test"})


def _words(argv: Iterable[str]) -> list[str]:
    out: list[str] = []
    for a in argv:
        a = str(a)
        if any(c.isspace() for c in a):  # a shell string (sh -c "..."): its words too
            try:
                out.extend(shlex.split(a, comments=True))
            except ValueError:
                out.extend(a.split())
        else:
            out.append(a)
    return out


def _relative(word: str) -> bool:
    if not word or word.startswith(("-", "/", "~", "$")) or "=" in word or word in (".", ".."):
        return False
    return not any(c in word for c in "|&;<>()`'\"*?")


def named_paths(argv: Iterable[str]) -> list[str]:
    """The repository paths a command names: relative words ending in a script, deck or
    configuration suffix anywhere, and relative words holding a `/` where a program stands
    (first, after a shell separator) or where an interpreter there takes its script."""
    out: list[str] = []
    program, script_next = True, False
    for w in _words(argv):
        if w in SHELL_SEPARATORS:
            program, script_next = True, False
            continue
        if _relative(w) and (w.endswith(SCRIPT_SUFFIXES) or ("/" in w and (program or script_next))):
            out.append(w)
        if w.startswith("-"):
            continue  # an option: the program's script may still follow
        script_next = program and os.path.basename(w) in INTERPRETERS
        program = False
    return out


def _norm(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path.rstrip("/")


def _with_subtree(path: str) -> tuple[str, ...]:
    p = _norm(path)
    return (p, p + "/**") if p and ".." not in p.split("/") else ()


def is_pytest_like(argv: Iterable[str]) -> bool:
    return any(os.path.basename(w) in PYTEST_WORDS for w in _words(argv))


def suite_inputs(suite: Mapping[str, Any], repo_globs: Iterable[str] = ()) -> tuple[str, ...]:
    """The globs of a suite's inputs (see the module doc), sorted, without repeats."""
    out: set[str] = {str(g) for g in suite.get("inputs") or ()}
    argv = [str(a) for a in suite.get("argv") or ()]
    if is_pytest_like(argv):
        out.update(PYTEST_INPUTS)
    for w in named_paths(argv):
        out.update(_with_subtree(w))
    params = suite.get("params") if isinstance(suite.get("params"), Mapping) else {}
    for key in DECK_KEYS:
        v = params.get(key)
        for item in (v if isinstance(v, list) else [v]):
            if isinstance(item, str) and not item.startswith("builtin:"):
                out.update(_with_subtree(item))
    out.update(str(g) for g in repo_globs)
    return tuple(sorted(g for g in out if g))


def suite_name(suite: Mapping[str, Any]) -> str:
    """A suite's name: its `name`, else "tests" for a command suite (the
    project's test command), else the domain suite kind."""
    if suite.get("name"):
        return str(suite["name"])
    return "tests" if suite.get("suite") == "command" else str(suite["suite"])


def provided_suites(validations: Iterable[Mapping[str, Any]]) -> set[str]:
    """What a work queue's suites can satisfy: each suite's name and its kind."""
    return {x for v in validations or () for x in (suite_name(v), str(v.get("suite")))}


def required_inputs(suites: Iterable[Mapping[str, Any]], repo_globs: Iterable[str] = ()
                    ) -> dict[str, tuple[str, ...]]:
    """Suite name -> its input globs, for the required suites."""
    repo_globs = tuple(repo_globs)
    return {suite_name(s): suite_inputs(s, repo_globs) for s in suites if s.get("required", True)}


def changed_inputs(parsed: ParsedDiff, globs: Iterable[str]) -> list[str]:
    """The base paths a diff modifies, removes or renames away that are inputs (added files are not)."""
    hit = globs_matcher(tuple(globs))
    return sorted({fp.old_path for fp in parsed.files if fp.old_path is not None and hit(fp.old_path)})


def judged_by(paths: Iterable[str], inputs: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The suites whose inputs hold any of `paths`."""
    paths = list(paths)
    return sorted(n for n, globs in inputs.items() if any(map(globs_matcher(tuple(globs)), paths)))


def overlay(base: Mapping[str, tuple[str, str]], head: Mapping[str, tuple[str, str]],
            globs: Iterable[str]) -> dict[str, tuple[str, str]]:
    """path -> (mode, oid): the base's input files that the head lacks or holds otherwise."""
    hit = globs_matcher(tuple(globs))
    return {p: mo for p, mo in sorted(base.items()) if hit(p) and head.get(p) != mo}


# -- shell: git ------------------------------------------------------------------------------


def repo_globs(repo: Path | str, base_ref: str) -> tuple[str, ...]:
    """The globs the repository lists in `.dome/validation-inputs` at `base_ref` (never from a proposal)."""
    from . import gitio
    proc = gitio.git(repo, "show", f"{base_ref}:{REPO_INPUTS_FILE}", check=False)
    return parse_protected_file(proc.stdout.decode("utf-8", "replace")) if proc.returncode == 0 else ()


def _files(repo: Path | str, tree_ish: str) -> dict[str, tuple[str, str]]:
    from . import gitio
    out: dict[str, tuple[str, str]] = {}
    for rec in gitio.git(repo, "ls-tree", "-r", "-z", "--full-tree", tree_ish).stdout.split(b"\x00"):
        if rec:
            meta, _, path = rec.partition(b"\t")
            mode, typ, oid = meta.decode().split(" ")
            if typ == "blob":
                out[path.decode("utf-8", "surrogateescape")] = (mode, oid)
    return out


def base_inputs_tree(repo: Path | str, head_tree: str, base_ref: str, globs: Iterable[str]
                     ) -> tuple[str, list[str]]:
    """(tree, restored paths): the head's tree with the base's input files put back.
    The head's own added inputs stay, so the suite runs the base's tests and the new ones."""
    from . import gitio
    put_back = overlay(_files(repo, base_ref), _files(repo, head_tree), globs)
    if not put_back:
        return head_tree, []
    with tempfile.TemporaryDirectory(prefix="dome-inputs-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        gitio.git(repo, "read-tree", head_tree, env=env)
        info = b"".join(f"{m} {o}\t".encode() + p.encode("utf-8", "surrogateescape") + b"\x00"
                        for p, (m, o) in put_back.items())
        gitio.git(repo, "update-index", "-z", "--replace", "--index-info", input=info, env=env)
        tree = gitio.git(repo, "write-tree", env=env).stdout.decode().strip()
    return tree, sorted(put_back)
