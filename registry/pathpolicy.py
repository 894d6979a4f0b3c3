"""One path policy for every tool behind the MCP front door that touches files.

Reads only under the read roots; writes only under the write roots (the
host's artifact root is always one); never over an existing file unless the
call says `overwrite: true`. Every decision is made on the fully resolved
path (symlinks followed, `..` folded) before anything is opened, and a
refusal names the root set the path left, never what lies outside it.

The decisions are pure (`PathPolicy.read`, `.write`, `.deck`); `reserve` is
the one edge that touches the file system: it creates a new output file with
O_EXCL | O_NOFOLLOW so that a link or file planted after the check cannot be
written through.

The host hands the policy to its workers in the environment
(`DOME_MCP_READ_ROOTS`, `DOME_MCP_WRITE_ROOTS`, `DOME_MCP_DECK_ROOTS`,
`DOME_MCP_ARTIFACT_ROOT`, each os.pathsep-separated); the KLayout tools'
`KLAYOUT_MCP_ALLOWED_ROOTS` is read as read roots too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .errors import DomeError

READ_ENV = "DOME_MCP_READ_ROOTS"
WRITE_ENV = "DOME_MCP_WRITE_ROOTS"
DECK_ENV = "DOME_MCP_DECK_ROOTS"
ARTIFACT_ENV = "DOME_MCP_ARTIFACT_ROOT"
KLAYOUT_ENV = "KLAYOUT_MCP_ALLOWED_ROOTS"
# a deck is one of these, by suffix and script type; anything else is not run
DECK_SUFFIXES = {"ruby": (".drc", ".lydrc", ".lym", ".rb"), "python": (".py",)}


class PathPolicyError(DomeError):
    """A path the policy refused (the subclasses carry the codes)."""


class PathOutsideRoots(PathPolicyError):
    code = "PATH_OUTSIDE_ROOTS"


class PathExists(PathPolicyError):
    """An output path names an existing file and the call did not say overwrite (or may not)."""

    code = "PATH_EXISTS"


class NotADeck(PathPolicyError):
    code = "NOT_A_DECK"


class SecretInRoot(DomeError):
    """The host refuses to start: a root it would serve holds its own secrets."""

    code = "SECRET_IN_ROOT"


def _real(p: str | Path) -> Path:
    return Path(os.path.realpath(p))


def root_of(path: Path, roots: tuple[Path, ...]) -> Path | None:
    """The root (resolved) that holds the resolved `path`, or None: the one containment test."""
    for root in roots:
        if path == root or root in path.parents:
            return root
    return None


def split_roots(raw: str | None) -> tuple[Path, ...]:
    return tuple(_real(r) for r in (raw or "").split(os.pathsep) if r.strip())


def client_folder(name: str) -> str:
    """A client or session name as one safe path component (the artifact folder's name)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:64].strip(".")
    return safe or "anonymous"


@dataclass(frozen=True)
class PathPolicy:
    read_roots: tuple[Path, ...]
    write_roots: tuple[Path, ...]  # the artifact root first
    deck_roots: tuple[Path, ...]

    @classmethod
    def of(cls, *, read: tuple[Path, ...] | list[Path], write: tuple[Path, ...] | list[Path],
           decks: tuple[Path, ...] | list[Path] = ()) -> "PathPolicy":
        w = tuple(_real(p) for p in write)
        # what a tool may write it may read back; a deck root is readable
        d = tuple(_real(p) for p in decks)
        r = tuple(dict.fromkeys((*(_real(p) for p in read), *w, *d)))
        return cls(read_roots=r, write_roots=w, deck_roots=d)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "PathPolicy | None":
        """The policy the host gave this worker, or None when it gave none (a worker run by hand)."""
        env = os.environ if env is None else env
        art = env.get(ARTIFACT_ENV)
        if not art:
            return None
        return cls.of(read=split_roots(env.get(READ_ENV)) + split_roots(env.get(KLAYOUT_ENV)),
                      write=(_real(art), *split_roots(env.get(WRITE_ENV))),
                      decks=split_roots(env.get(DECK_ENV)))

    def env(self) -> dict[str, str]:
        return {ARTIFACT_ENV: str(self.write_roots[0]),
                READ_ENV: os.pathsep.join(map(str, self.read_roots)),
                WRITE_ENV: os.pathsep.join(map(str, self.write_roots[1:])),
                DECK_ENV: os.pathsep.join(map(str, self.deck_roots))}

    @property
    def artifact_root(self) -> Path:
        return self.write_roots[0]

    # decisions -------------------------------------------------------------
    def _resolve(self, raw: object, field: str, base: Path | None) -> Path:
        if not isinstance(raw, str) or not raw:
            raise PathOutsideRoots(f"{field} must be a non-empty path", details={"field": field, "reason": "empty"})
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
            raise PathOutsideRoots(f"{field} holds control characters",
                                   details={"field": field, "reason": "control_characters"})
        if not os.path.isabs(raw):
            if base is None:
                raise PathOutsideRoots(f"{field} must be an absolute path",
                                       details={"field": field, "reason": "not_absolute"})
            raw = str(base / raw)
        return _real(raw)

    def read(self, raw: object, *, field: str) -> Path:
        """The resolved path of a file a tool may read, or PathOutsideRoots naming the read roots."""
        real = self._resolve(raw, field, None)
        if root_of(real, self.read_roots) is None:
            raise self._outside(field, "read", self.read_roots)
        return real

    def write(self, raw: object, *, field: str, overwrite: bool = False, base: Path | None = None) -> Path:
        """The resolved path a tool may create (relative paths land under `base`, the client's folder).

        An existing path is refused unless `overwrite` is true; a dangling symlink counts as existing
        (writing through it would land wherever it points)."""
        real = self._resolve(raw, field, base)
        if root_of(real, self.write_roots) is None:
            raise self._outside(field, "write", self.write_roots)
        literal = Path(raw) if isinstance(raw, str) and os.path.isabs(raw) else None
        exists = os.path.lexists(real) or (literal is not None and os.path.islink(literal))
        if exists and not overwrite:
            raise PathExists(f"{field} names an existing file; pass overwrite: true to replace it",
                             details={"field": field, "reason": "exists"},
                             hints=["choose a new name, or pass overwrite: true"])
        if exists and not real.is_file():
            raise PathExists(f"{field} names something that is not a regular file",
                             details={"field": field, "reason": "not_a_file"})
        return real

    def deck(self, raw: object, *, field: str, script_type: str | None) -> tuple[Path, str]:
        """(resolved deck, its script type): under a deck root, with a deck suffix for its type."""
        real = self._resolve(raw, field, None)
        if root_of(real, self.deck_roots) is None:
            raise self._outside(field, "deck", self.deck_roots)
        return real, deck_kind(real, script_type, field=field)

    def _outside(self, field: str, access: str, roots: tuple[Path, ...]) -> PathOutsideRoots:
        # the roots are the operator's own configuration; what the path resolved to is not echoed
        return PathOutsideRoots(f"{field} is outside the {access} roots",
                                details={"field": field, "access": access, "reason": "outside_allowed_roots",
                                         "roots": [str(r) for r in roots]},
                                hints=[f"use a path under the {access} roots (relative output paths land in "
                                       "your artifact folder)"])


def check_run_inputs(read_roots: tuple[Path, ...], queue: Path, repo: Path) -> None:
    """PathOutsideRoots unless a submitted run's queue file and repository both lie under the read roots
    (each resolved first): an agent may only run what it could read."""
    policy = PathPolicy.of(read=read_roots, write=())
    policy.read(str(queue), field="work_queue")
    policy.read(str(repo), field="work_queue.repo")


def reserve(path: Path, *, overwrite: bool) -> None:
    """Create `path` for writing without following a link planted at it, or refuse an existing file.

    With overwrite the file must already be a regular file (checked by the policy), so opening it
    O_NOFOLLOW is enough; without, O_EXCL makes the creation and the check one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (0 if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise PathExists("the output path appeared before it could be created",
                         details={"reason": "exists"}) from None
    except OSError as exc:  # ELOOP: a symlink was planted at the path
        raise PathOutsideRoots("the output path became a link before it could be created",
                               details={"reason": "link", "errno": exc.errno}) from None
    os.close(fd)


def deck_kind(path: Path, script_type: str | None, *, field: str = "script_path") -> str:
    """The deck's script type (given, else from the suffix), or NotADeck when its suffix is not a deck's."""
    kind = script_type or ("python" if path.suffix.lower() == ".py" else "ruby")
    suffixes = DECK_SUFFIXES.get(kind, ())
    if path.suffix.lower() not in suffixes:
        raise NotADeck(f"{field} is not a {kind} deck (suffix {path.suffix or 'none'})",
                       details={"field": field, "script_type": kind, "suffixes": list(suffixes)},
                       hints=["a Ruby deck ends in .drc/.lydrc/.lym/.rb, a Python deck in .py"])
    return kind


def secrets_inside(roots: tuple[Path, ...], secrets: list[Path]) -> list[tuple[Path, Path]]:
    """(root, secret) for each secret path a root contains (or equals); pure but for resolving links."""
    out = []
    for secret in map(_real, secrets):
        root = root_of(secret, roots)
        if root is not None:
            out.append((root, secret))
    return out


# The request fields of each tool that name files, and what the tool does with them (the one table;
# the host checks it before any work, the worker again where it opens the file).
#   read: a file or folder the tool reads; write: a file it creates; write_dir: a folder it writes new
#   files into (`files`: their names, checked like `write`); resume_dir: a folder it may write into
#   again (a tiling journal); deck: a script it runs.
TOOL_PATHS: dict[str, dict[str, str]] = {
    "evaluate": {"layout": "read", "mask": "read", "kernels": "read"},
    "simulate": {"layout": "read", "mask": "read", "kernels": "read", "out_dir": "write_dir"},
    "optimize": {"layout": "read", "kernels": "read", "out": "write", "tiling.dir": "resume_dir"},
    "open_layout": {"path": "read"},
    "run_drc_script": {"script_path": "deck"},
    "run_submit": {"work_queue": "read"},
}
OVERWRITE_FIELD = "overwrite"
# files a tool writes beside or inside the path a field names (optimize's .png preview of a layout mask)
SIMULATE_FILES = tuple(f"print_{c}.png" for c in ("nominal", "inner", "outer"))


def _get(args: Mapping[str, object], dotted: str) -> object:
    node: object = args
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _set(args: dict, dotted: str, value: str) -> None:
    *parents, last = dotted.split(".")
    node = args
    for part in parents:
        node[part] = dict(node[part])
        node = node[part]
    node[last] = value


def siblings(tool: str, field: str, path: Path) -> list[Path]:
    """Other files a write to `path` creates (each must pass the same check)."""
    if tool == "optimize" and field == "out" and path.suffix.lower() in (".oas", ".gds"):
        return [path.with_suffix(".png")]
    return []


def apply(policy: PathPolicy, tool: str, args: Mapping[str, object], *, base: Path | None = None
          ) -> tuple[dict, list[Path]]:
    """(the arguments with every path field resolved and absolute, the new files to reserve).

    Raises PathOutsideRoots / PathExists / NotADeck before anything is opened. `base` is the
    client's artifact folder: a relative output path lands there."""
    fields = TOOL_PATHS.get(tool)
    out = dict(args)
    overwrite = bool(out.pop(OVERWRITE_FIELD, False))
    if not fields:
        return out, []
    new_files: list[Path] = []
    for field, access in fields.items():
        raw = _get(out, field)
        if raw is None:
            continue
        if access == "read":
            real = policy.read(raw, field=field)
        elif access == "deck":
            real, _ = policy.deck(raw, field=field, script_type=_get(out, "script_type"))  # type: ignore[arg-type]
        elif access == "write":
            real = policy.write(raw, field=field, overwrite=overwrite, base=base)
            extra = [policy.write(str(s), field=field, overwrite=overwrite) for s in siblings(tool, field, real)]
            new_files += [real, *extra]
        else:  # a folder: inside the write roots; its files are new unless overwrite
            real = policy._resolve(raw, field, base)
            if root_of(real, policy.write_roots) is None:
                raise policy._outside(field, "write", policy.write_roots)
            if os.path.lexists(real) and not real.is_dir():
                raise PathExists(f"{field} names something that is not a folder",
                                 details={"field": field, "reason": "not_a_folder"})
            if access == "write_dir":
                for name in SIMULATE_FILES:
                    policy.write(str(real / name), field=field, overwrite=overwrite)
        _set(out, field, str(real))
    return out, new_files


def outputs(tool: str, args: Mapping[str, object]) -> list[Path]:
    """The files a call with these (checked, absolute) arguments writes, for linking them as artifacts."""
    out: list[Path] = []
    for field, access in TOOL_PATHS.get(tool, {}).items():
        raw = _get(args, field)
        if not isinstance(raw, str):
            continue
        if access == "write":
            out += [Path(raw), *siblings(tool, field, Path(raw))]
        elif access == "write_dir":
            out += [Path(raw) / name for name in SIMULATE_FILES]
    return out
