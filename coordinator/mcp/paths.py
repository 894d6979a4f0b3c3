"""The host's side of the path policy: its roots, the secrets check at start, the token file.

The decisions are registry.pathpolicy's (the worker makes the same ones again
where it opens files); this module only gathers the host's configuration:

- read roots: $DOME_MCP_READ_ROOTS and $KLAYOUT_MCP_ALLOWED_ROOTS, else the
  working directory;
- write roots: the artifact root (OPS_ROOT/mcp/artifacts, one folder per
  client inside), the KLayout artifact root, and $DOME_MCP_WRITE_ROOTS;
- deck roots: $DOME_MCP_DECK_ROOTS, else the roots the operator named in
  $KLAYOUT_MCP_ALLOWED_ROOTS (never the working directory by default), and
  dome's own decks.

A host whose roots hold its own secrets (the ops root with its keys, ledger
and token file) refuses to start. The HTTP door's operator token file keeps
only the token's SHA-256 (identity.token_digest, as for named clients), 0600
in a 0700 folder; one found with another mode, owner or type is refused.
"""
from __future__ import annotations

import json
import os
import secrets as _secrets
import stat
from pathlib import Path
from typing import Callable, Mapping

from registry.errors import DomeError

from .identity import token_digest
from registry.pathpolicy import (DECK_ENV, KLAYOUT_ENV, READ_ENV, WRITE_ENV, PathPolicy, SecretInRoot,
                                 check_run_inputs, client_folder, secrets_inside, split_roots)

ARTIFACTS = Path("mcp") / "artifacts"
KLAYOUT_ARTIFACTS = Path("mcp") / "klayout"
TOKEN_FILE = "http.token"
MAX_QUEUE_BYTES = 4 * 1024 * 1024  # a bigger file is no queue the host reads; `dome run` decides
LOCAL_CLIENT = "local"  # the stdio door's client folder until the client's own name is known


class TokenFileUnsafe(DomeError):
    code = "TOKEN_FILE_UNSAFE"


def _builtin_decks() -> Path:
    # located, never imported: the coordinator reaches worker_sdk only across a process boundary
    from coordinator.executors.sandbox import dome_source_roots

    return dome_source_roots()[1] / "klayout_tools" / "decks"


def host_policy(ops_root: Path, env: Mapping[str, str]) -> PathPolicy:
    read = split_roots(env.get(READ_ENV)) + split_roots(env.get(KLAYOUT_ENV))
    decks = split_roots(env.get(DECK_ENV)) or split_roots(env.get(KLAYOUT_ENV))
    klayout_art = Path(env.get("KLAYOUT_MCP_ARTIFACT_ROOT") or ops_root / KLAYOUT_ARTIFACTS).absolute()
    write = (ops_root / ARTIFACTS, klayout_art, *split_roots(env.get(WRITE_ENV)))
    return PathPolicy.of(read=read or (Path.cwd(),), write=write, decks=(*decks, _builtin_decks()))


def secret_paths(ops_root: Path) -> list[Path]:
    return [ops_root, ops_root / "keys", ops_root / "mcp" / TOKEN_FILE]


def check_secrets(policy: PathPolicy, ops_root: Path) -> None:
    """SecretInRoot unless no root of the policy contains the ops root, its keys or its token file."""
    own = set(policy.write_roots[:2])  # the host's own artifact folders live in the ops root by design
    roots = tuple(r for r in dict.fromkeys((*policy.read_roots, *policy.write_roots, *policy.deck_roots))
                  if r not in own)
    hits = secrets_inside(roots, secret_paths(ops_root))
    if hits:
        root, secret = hits[0]
        raise SecretInRoot(f"the root {root} contains {secret}: an agent could read the host's secrets",
                           details={"root": str(root), "secret": str(secret)},
                           hints=[f"set {READ_ENV} (or {KLAYOUT_ENV}) to the folders agents may read, "
                                  "or keep the ops root (--ops-root) outside every root"])


def artifact_base(policy: PathPolicy, client: str | None) -> Path:
    """The client's own folder under the artifact root: relative output paths land here."""
    return policy.artifact_root / client_folder(client or LOCAL_CLIENT)


def check_queue_repo(policy: PathPolicy, queue: Path) -> None:
    """PathOutsideRoots unless the repository a (checked) queue names lies under the read roots.

    `repo` is relative to the queue's folder unless absolute, as `dome run` reads it. A file that is
    no queue is left to `dome run`, which refuses it with its own code (and checks these roots again
    on the queue it loads)."""
    try:
        with open(queue, "rb") as fh:
            raw = json.loads(fh.read(MAX_QUEUE_BYTES + 1)).get("repo")
    except (OSError, ValueError, AttributeError, RecursionError):
        return
    if isinstance(raw, str) and raw:
        check_run_inputs(policy.read_roots, queue, queue.parent / raw)


# the bearer token file ------------------------------------------------------
DIGEST_PREFIX = "sha256:"


class TokenFilePlain(DomeError):
    """The token file holds a plain token where only its hash may be (and could not be rehashed)."""

    code = "TOKEN_FILE_PLAIN"


def operator_token_digest(state_dir: Path, *, announce: Callable[[str], None]) -> str:
    """The SHA-256 (hex) of the operator's token, kept in state_dir/http.token; never the token itself.

    A new file is made 0600 in a 0700 folder and the new token is handed to `announce` once (the
    operator's terminal). A file found with another mode, owner or type is refused. A file of an
    older dome that holds the plain token is rehashed in place: the token stays valid, the file
    keeps only its hash."""
    path = state_dir / TOKEN_FILE
    if not os.path.lexists(path):
        token = _secrets.token_urlsafe(32)
        try:
            _write_private(state_dir, DIGEST_PREFIX + token_digest(token) + "\n", exclusive=True)
            announce(f"dome mcp: a new operator token (shown once; {path} keeps only its SHA-256): {token}")
        except FileExistsError:  # another door made it first: that one's token stands
            pass
    content = _read_trusted(path, state_dir)
    if content.startswith(DIGEST_PREFIX):
        digest = content[len(DIGEST_PREFIX):]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise TokenFileUnsafe("the token file holds no valid SHA-256", details={"path": str(path),
                                  "reason": "malformed"}, hints=["remove it; dome mcp --http makes a new one"])
        return digest
    if not content:
        raise TokenFileUnsafe("the token file is empty", details={"path": str(path), "reason": "empty"},
                              hints=["remove it; dome mcp --http makes a new one"])
    digest = token_digest(content)  # a plain token of an older dome: keep the token, drop its bytes
    try:
        _write_private(state_dir, DIGEST_PREFIX + digest + "\n", exclusive=False)
    except OSError as exc:
        raise TokenFilePlain("the token file holds the plain token and could not be rewritten with its hash",
                             details={"path": str(path), "errno": exc.errno},
                             hints=[f"make {state_dir} writable by this user and start again, or remove "
                                    f"{path} (dome mcp --http then makes a new token and shows it once)"]) from None
    announce(f"dome mcp: {path} held the plain operator token; it now keeps only its SHA-256 "
             "(the token itself is unchanged)")
    return digest


def _read_trusted(path: Path, state_dir: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # ELOOP: a symlink
        raise TokenFileUnsafe("the token file is a symbolic link", details={"path": str(path), "reason": "symlink"},
                              hints=["remove it; dome mcp --http makes a new one"]) from None
    with os.fdopen(fd) as fh:
        problem = token_file_problem(os.fstat(fh.fileno()), os.stat(state_dir), os.geteuid())
        if problem is not None:
            raise TokenFileUnsafe(f"the token file is unsafe: {problem}",
                                  details={"path": str(path), "reason": problem},
                                  hints=["remove it (dome mcp --http makes a new one 0600), or fix its owner and mode"])
        return fh.read(4096).strip()


def _write_private(state_dir: Path, text: str, *, exclusive: bool) -> None:
    """state_dir/http.token := text, 0600 in a 0700 folder; created anew (O_EXCL) or replaced atomically."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)
    target = state_dir / TOKEN_FILE
    path = target if exclusive else state_dir / f".{TOKEN_FILE}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    if not exclusive and os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    if not exclusive:
        os.replace(path, target)


def token_file_problem(st: os.stat_result, folder: os.stat_result, uid: int) -> str | None:
    """Why a token file (and its folder) may not be trusted, or None (pure)."""
    if not stat.S_ISREG(st.st_mode):
        return "not_a_regular_file"
    if st.st_uid != uid:
        return "wrong_owner"
    if st.st_mode & 0o077:
        return "readable_by_others"
    if folder.st_uid != uid or folder.st_mode & 0o022:
        return "folder_writable_by_others"
    return None
