"""An empty git directory, written directly (what `git init --template=` makes).

A worker makes two per attempt (its checkout's and the private one its diff is computed in);
starting a git process for each cost more CPU than the rest of the step. Both borrow their
objects from the read-only base repository through `objects/info/alternates`.
"""
from __future__ import annotations

from pathlib import Path

_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = {bare}\n"


def init_git_dir(git_dir: Path, *, bare: bool, alternates: Path | None = None) -> None:
    """A fresh repository at `git_dir` (bare: the directory itself; else `git_dir` is the `.git`),
    with no hooks, no description and no info/exclude; `alternates` names a borrowed object store."""
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (git_dir / "config").write_text(_CONFIG.format(bare="true" if bare else "false"))
    if alternates is not None:
        (git_dir / "objects" / "info" / "alternates").write_text(f"{alternates}\n")
