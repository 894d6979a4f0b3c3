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
and token file) refuses to start. The HTTP bearer token file is made 0600 in
a 0700 folder, and one found with another mode, owner or type is refused.
"""
from __future__ import annotations

import os
import secrets as _secrets
import stat
from pathlib import Path
from typing import Mapping

from registry.errors import DomeError
from registry.pathpolicy import (DECK_ENV, KLAYOUT_ENV, READ_ENV, WRITE_ENV, PathPolicy, SecretInRoot,
                                 client_folder, secrets_inside, split_roots)

ARTIFACTS = Path("mcp") / "artifacts"
KLAYOUT_ARTIFACTS = Path("mcp") / "klayout"
TOKEN_FILE = "http.token"
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


# the bearer token file ------------------------------------------------------
def load_or_create_token(state_dir: Path) -> str:
    """The token in state_dir/http.token: created 0600 in a 0700 folder, or refused when found unsafe."""
    path = state_dir / TOKEN_FILE
    if not os.path.lexists(path):
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(state_dir, 0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(_secrets.token_urlsafe(32))
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
        return fh.read().strip()


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
