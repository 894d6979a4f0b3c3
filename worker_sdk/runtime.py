"""The worker runtime: `python -m worker_sdk SPAWN_SPEC.json`.

1. Read the SpawnSpec and validate it (closed schema).
2. Verify the worker's own grant: a DSSE envelope signed by the coordinator
   key (public key from $DOME_COORDINATOR_PUB), bound to this run, wave and
   node_execution_id, not expired.
3. Check out the exact base SHA into the scratch directory from the
   read-only base repository ($DOME_BASE_GIT) and check its tree hash.
4. Run the action through the intent registry with a CancellationToken
   (SIGTERM and the attempt deadline cancel it), progress and artifacts
   going to the gateway.
5. Turn what changed in the checkout into a PatchProposal, upload the
   canonical diff, submit the proposal, and report the result with
   complete_task. Exit 0 when the task succeeded, 1 when it failed, 2 when
   the worker could not start (bad spec, bad grant, no gateway).
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from registry.canonical import canonical_json
from registry.base_snapshot import SUBDIR, Snapshot, SnapshotInvalid, decode
from registry.errors import DomeError
from registry.signing import Keyring, PublicKey, SignatureError, dsse_verify

from . import sandbox_limits
from .cancel import CancellationToken
from .checkout import BaseCheckout, checkout_snapshot, safe_path
from .gitdir import init_git_dir
from .intents import IntentContext, handler_action, resolve

PAYLOAD_TYPE = "application/vnd.dome.toolprofile+json"


class WorkerStartError(DomeError):
    code = "WORKER_START_FAILED"


def check_spawn_spec(spawn: Any) -> None:
    """The SpawnSpec against its closed schema. A conforming spec is passed by the small checker
    (no jsonschema import on a worker's start); any other is judged by the full validator, which
    refuses it with the SchemaValidationError naming every problem."""
    from registry.schema_lite import Unsupported, is_valid
    try:
        if is_valid("spawn_spec", spawn):
            return
    except Unsupported:
        pass
    from registry.schema_store import validate
    validate("spawn_spec", spawn)


def token_of(envelope: dict[str, Any]) -> str:
    """The bearer token of a grant envelope (the grants area's token format)."""
    from registry.toolprofile import envelope_to_token
    return envelope_to_token(envelope)


def load_public_key(path: str) -> PublicKey:
    kid, b64 = Path(path).read_text().split()[:2]
    key = PublicKey.from_raw(base64.b64decode(b64))
    if key.kid != kid:
        raise WorkerStartError("coordinator public key file: kid does not match the key")
    return key


EXPIRY_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # a grant's `expires_at`
# The coordinator's clock decides an attempt's timeout (it writes task.timeout and kills the
# process group). The worker's own deadline is a backstop for a coordinator that cannot reach it,
# set this much later so that it never wins the race and turns a timeout into a plain failure.
OWN_DEADLINE_GRACE_S = 3.0


def verify_own_grant(spawn: dict[str, Any], pub: PublicKey, *, now: float | None = None) -> dict[str, Any]:
    try:
        payload, _ = dsse_verify(spawn["grant"], Keyring({pub.kid: pub}), expected_type=PAYLOAD_TYPE)
    except SignatureError as exc:
        raise WorkerStartError(f"my grant does not verify: {exc.message}", code="GRANT_INVALID") from None
    profile = json.loads(payload)
    for k in ("run_id", "wave_id", "node_id", "node_execution_id"):
        if profile.get(k) != spawn.get(k):
            raise WorkerStartError(f"my grant is bound to another {k}", code="GRANT_BINDING_MISMATCH",
                                   details={"field": k})
    from datetime import datetime, timezone
    exp = datetime.strptime(profile["expires_at"], EXPIRY_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    if (now or time.time()) > exp + 5:
        raise WorkerStartError("my grant has expired", code="GRANT_EXPIRED")
    return profile


def load_worker_key(path: str | None, profile: dict[str, Any]) -> Any:
    """The attempt's private key (a 0600 file the coordinator bound in, never in
    the SpawnSpec): needed when the grant is sender-constrained (`cnf`)."""
    cnf = profile.get("cnf")
    if cnf is None:
        return None
    from registry.signing import SigningKey
    if not path or not Path(path).is_file():
        raise WorkerStartError("my grant is sender-constrained but no worker key was delivered",
                               code="WORKER_KEY_MISSING")
    kid, b64 = Path(path).read_text().split()[:2]
    key = SigningKey(base64.b64decode(b64))
    if key.kid != kid or key.kid != cnf.get("kid"):
        raise WorkerStartError("the worker key is not the one my grant is bound to", code="WORKER_KEY_MISMATCH")
    return key


def _git(cwd: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "dome-worker", "GIT_AUTHOR_EMAIL": "worker@dome.invalid",
           "GIT_COMMITTER_NAME": "dome-worker", "GIT_COMMITTER_EMAIL": "worker@dome.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
                          timeout=600).stdout.strip()


def checkout(base_git: Path, scratch: Path, sha: str, tree: str) -> BaseCheckout:
    """A private checkout of exactly `sha` (objects shared read-only with base_git). Returns its
    index file as written, before any action ran, and that file's mtime (the diff starts from
    them: see proposal.canonical_worktree_diff), and, when the coordinator left a snapshot of the
    base, the files as written (no git process at all: see worker_sdk.checkout)."""
    scratch.parent.mkdir(parents=True, exist_ok=True)
    # what `clone --shared` does, without opening base_git as a repository: it may belong to another
    # uid (a container's worker user reading the coordinator's mirror), which git refuses to open
    objects = base_git / "objects" if (base_git / "objects").is_dir() else base_git / ".git" / "objects"
    snap = _snapshot(base_git, sha)
    if snap is not None:
        if snap.tree != tree:
            raise WorkerStartError("base tree hash mismatch", code="BASE_TREE_MISMATCH",
                                   details={"expected": tree, "actual": snap.tree})
        return checkout_snapshot(snap, scratch, objects)
    # written here, not by `git init`: no template (no sample hooks, description or info/exclude)
    # and one git process fewer per attempt
    init_git_dir(scratch / ".git", bare=False, alternates=objects)
    _git(scratch, "checkout", "--quiet", "--detach", sha)
    actual = _git(scratch, "rev-parse", "HEAD^{tree}")
    if actual != tree:
        raise WorkerStartError("base tree hash mismatch", code="BASE_TREE_MISMATCH",
                               details={"expected": tree, "actual": actual})
    index = scratch / ".git" / "index"
    return BaseCheckout(index=(index.read_bytes(), index.stat().st_mtime_ns))


def _snapshot(base_git: Path, sha: str) -> Snapshot | None:
    """The coordinator's snapshot of `sha` in the base repository, if it left one that is usable."""
    root = base_git if (base_git / "objects").is_dir() else base_git / ".git"
    try:
        snap = decode((root / SUBDIR / sha).read_bytes())
    except (OSError, ValueError, KeyError, SnapshotInvalid):
        return None
    if snap.commit != sha or not all(safe_path(e.path) for e in snap.entries):
        return None  # git's own checkout refuses such paths, with its reasons
    return snap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spawn_path = argv[0] if argv else os.environ.get("DOME_SPAWN", "/dome/spawn.json")
    client = None
    try:
        spawn = json.loads(Path(spawn_path).read_text())
        check_spawn_spec(spawn)
        pub = load_public_key(os.environ.get("DOME_COORDINATOR_PUB", "/dome/coordinator.pub"))
        profile = verify_own_grant(spawn, pub)
        scratch = Path(os.environ.get("DOME_SCRATCH", "/dome/scratch")) / "repo"
        base = checkout(Path(os.environ.get("DOME_BASE_GIT", "/dome/base.git")), scratch,
                              spawn["base_ref"], spawn["base_tree_hash"])
        from .client import GatewayClient
        gw = spawn["gateway"]
        worker_key = load_worker_key(os.environ.get("DOME_WORKER_KEY"), profile)
        client = GatewayClient(token=token_of(spawn["grant"]), profile=profile,
                               socket=gw.get("socket"), url=gw.get("url"), worker_key=worker_key)
    except Exception as exc:  # noqa: BLE001 - reported on stderr for the executor
        err = exc.to_object() if isinstance(exc, DomeError) else {"code": "WORKER_START_FAILED",
                                                                  "message": f"{type(exc).__name__}: {exc}"}
        print(json.dumps({"dome_worker_error": err}), file=sys.stderr)
        return 2

    timeout = float(spawn.get("timeout_s", 3600))
    token = CancellationToken(deadline=time.monotonic() + timeout + OWN_DEADLINE_GRACE_S)
    signal.signal(signal.SIGTERM, lambda *_: token.cancel("terminated by the coordinator"))
    meta_path = os.environ.get("DOME_TASK_META")
    constraints = json.loads(Path(meta_path).read_text()) if meta_path and Path(meta_path).is_file() else {}
    t0 = time.monotonic()
    try:
        # liveness starts at dispatch; heartbeats come from the intent (every ~2 s while a command runs)
        handler = resolve(spawn["action_spec"]["intent"])
        action = handler_action(dict(spawn["action_spec"]))
        if action["intent"] == "command":  # what a command may want to know about its attempt
            action["env"] = {"DOME_RUN_ID": spawn["run_id"], "DOME_NODE_ID": spawn["node_id"],
                             "DOME_ATTEMPT": str(spawn.get("attempt", 1)), "DOME_SEED": str(spawn["determinism_seed"]),
                             **action.get("env", {})}
        ctx = IntentContext(scratch=scratch, action=action, seed=int(spawn["determinism_seed"]),
                            token=token, progress=lambda f, m="": client.report_progress(f, m),
                            put_artifact=lambda data, mt="application/octet-stream": (
                                client.put_artifact(data, mt) if "put_artifact" in client.allowed else ""),
                            limits=constraints, gateway=client)
        try:
            result = handler(ctx)
        except Exception:
            sandbox_limits.check()  # a limit the action hit explains its failure better than the failure
            raise
        sandbox_limits.check()  # the limits held; an attempt that ran into one is not a success
        from .proposal import build_proposal
        task = constraints.get("task", {})
        built = build_proposal(scratch, spawn=spawn, profile=profile, intent_tags=task.get("intent_tags"),
                               declared_constraints=task.get("declared_constraints"), risk=task.get("risk"),
                               budgets_used={"calls": client.used["calls"], "bytes": client.used["bytes"],
                                             "wall_seconds": round(time.monotonic() - t0, 3)},
                               upload=lambda data: client.put_artifact_carried(data, "text/x-diff", "patch.diff"),
                               base=base)
        proposal_id = None
        summary = dict(result.summary)
        if built is None:  # nothing to change: a success unless the task requires a patch (below)
            summary["no_change"] = True
        if built is not None:  # the diff and the proposal travel with complete_task: one request
            proposal, _canonical = built
            proposal_id = client.submit_patch_carried(proposal)
        elif "patch_proposal" in constraints.get("required_outputs", []):
            raise DomeError("the action changed nothing but the node requires a patch_proposal",
                            code="REQUIRED_OUTPUT_MISSING", retry="light")
        # the terminal write: spends the single-use grant
        client.complete_task("succeeded", summary=summary, metrics=result.metrics,
                             evidence=result.evidence, proposal_id=proposal_id)
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure is reported through the gateway
        err = exc.to_object() if isinstance(exc, DomeError) else {
            "code": "WORKER_EXCEPTION", "message": f"{type(exc).__name__}: {exc}", "details": {},
            "hints": [], "retry": "light"}
        try:
            client.complete_task("failed", error=err)
        except Exception as exc2:  # noqa: BLE001
            print(json.dumps({"dome_worker_error": err, "report_failed": str(exc2)}), file=sys.stderr)
        print(json.dumps({"dome_worker_error": err}), file=sys.stderr)
        return 1
    finally:
        client.close()
        # the checkout is this worker's own: it goes with the attempt, deleted here at the
        # worker's cost rather than file by file by the coordinator (which removes what is left);
        # a scratch that is a mount of its own (the sandbox's tmpfs) goes with the sandbox whole
        if not os.path.ismount(scratch.parent):
            import shutil
            shutil.rmtree(scratch, ignore_errors=True)
