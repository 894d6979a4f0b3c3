"""The worker-facing tools and what each accepted call writes to the ledger.

Every write is idempotent on (run_id, method, idempotency_key): the first
call's result is stored in the same ledger transaction as its events; a
repeat with the same arguments returns that result (`duplicate: true`) and
writes nothing; a repeat with different arguments is IDEMPOTENCY_CONFLICT.
Each call must name the node_execution_id its grant is bound to, and the
attempt must still be live (not ended, cancelled or timed out).

Every call runs inside the grants verifier's `authorize` transaction
(`CallContext.tx`), so the verifier's `grant.call` event, the jti spend of a
single-use grant, the tool's events and the idempotency record commit
together or not at all.

| tool (dome.patch_proposal) | events |
|---|---|
| get_task (read; names what earlier attempts of the node put under `resume/`) | - |
| report_progress | task.progress (a heartbeat) |
| put_artifact | artifact.put (bytes in the blob store) |
| submit_patch | patch.submitted (verified: base, tree, recomputed digest, paths) |
| complete_task (terminal: spends the single-use grant) | task.completed |

Carried calls: submit_patch may carry the put_artifact of its diff, and
complete_task the put_artifact and submit_patch before it (`carried`: the
tool, its arguments and its own call proof). The gateway runs each carried
call first, in order, as the call it is (validated, authorised by the grant and
its own proof, charged, recorded, idempotent), then the call itself; the
first refusal answers the request. A task's three writes thus take one
request instead of three, with the same checks, charges and events, and one
durable commit: each call's transaction is a savepoint of the request's
(WorkerGateway._invoke), so a refused call rolls back alone.
"""
from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from registry import limits
from registry.canonical import digest_json
from registry.diffs import DiffError, check_canonicalization, parse_diff, serialize_diff, sha_digest
from registry.errors import DomeError
from registry.schema_lite import validate as schema_validate

from .. import runstate as rs
from ..integration.binding import COORDINATOR_FIELDS, ProposalBindingMismatch, check_binding, check_provenance
from ..integration.proposals import path_rejections
from .dispatch import ToolSpec

if TYPE_CHECKING:
    from ledger.blobs import BlobStore

    from ..runloop.writer import LedgerWriter

SCHEMA_VERSION = "1.0.0"
MAX_ARTIFACT_BYTES = limits.MAX_ARTIFACT_BYTES
FRESH_MAX, FRESH_MAX_BYTES = 16, 256 * 1024  # artifacts kept for the same request's submit_patch


class AttemptNotLive(DomeError):
    code = "ATTEMPT_NOT_LIVE"


class IdempotencyConflict(DomeError):
    code = "IDEMPOTENCY_CONFLICT"


class ProposalInvalid(DomeError):
    """A submit_patch the gateway refuses before recording it (integration's later verdict on a
    recorded proposal is `integration.proposals.ProposalRejected`)."""

    code = "PROPOSAL_INVALID"


class BaseMismatch(ProposalInvalid):
    code = "BASE_MISMATCH"


class PathDenied(ProposalInvalid):
    code = "PATH_DENIED"


@dataclass
class CallContext:
    """What the transport established about a call before the handler runs."""

    profile: Mapping[str, Any]
    method: str
    tx: Any = None  # the authorize() transaction the tool's writes join
    args_digest: str | None = None  # the digest of these very arguments, where the grant check made it


@dataclass
class GatewayBackend:
    run_id: str
    writer: LedgerWriter
    blobs: BlobStore
    attempt: Callable[[str], Mapping[str, Any] | None]  # neid -> {node_id, wave_id, base_ref, base_tree_hash, task}
    max_artifact_bytes: int = MAX_ARTIFACT_BYTES
    calls: dict[str, int] = field(default_factory=dict)
    # small artifacts just stored, by digest, for a submit_patch that reads its diff in the same
    # request (taken once; the blob store has them all)
    fresh: dict[str, bytes] = field(default_factory=dict)

    def keep(self, digest: str, data: bytes) -> None:
        if len(data) <= FRESH_MAX_BYTES:
            while len(self.fresh) >= FRESH_MAX:
                self.fresh.pop(next(iter(self.fresh)), None)
            self.fresh[digest] = data

    def artifact(self, digest: str) -> bytes:
        """An artifact's bytes: one this gateway just stored (their digest is the one asked
        for: it was computed from them), else the blob store's (which checks the digest)."""
        data = self.fresh.pop(digest, None)
        return self.blobs.get(digest) if data is None else data


def _key_schema() -> dict[str, Any]:
    return {"type": "string", "minLength": 8, "maxLength": 200, "pattern": "^[A-Za-z0-9._:@/+-]+$"}


def _neid_schema() -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": 200}


def _closed(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": props}


MAX_CARRIED = 4


def _carried(tools: list[str]) -> dict[str, Any]:
    """Earlier calls carried in this one's request, each a whole call: the tool, its arguments
    and its own call proof. The gateway runs each first, exactly as if it had come alone."""
    return {"type": "array", "maxItems": MAX_CARRIED, "items": _closed(
        {"tool": {"enum": tools}, "arguments": {"type": "object"}, "proof": {"type": ["string", "null"]}},
        ["tool", "arguments"])}


def path_policy(paths: list[str]) -> list[str]:
    """Paths a proposal may not touch (returned, empty when all are fine): the
    integration stage's path rules, so the gateway refuses exactly what
    integration would (`.gitignore` and `.github/` are ordinary paths)."""
    return [p for p in paths if path_rejections(p)]


def grant_of(att: Mapping[str, Any], neid: str) -> dict[str, Any]:
    """What the grant behind a call says about its attempt (the binding truth)."""
    return {"wave_id": att.get("wave_id"), "node_id": att.get("node_id"), "node_execution_id": neid,
            "attempt": att.get("attempt")}


def _live(backend: GatewayBackend, neid: str, call: CallContext | None) -> Mapping[str, Any]:
    """The attempt a call's grant is bound to (AttemptNotLive when it is not this one or unknown)."""
    if call is None or call.profile.get("node_execution_id") != neid:
        raise AttemptNotLive("the grant is not bound to this node_execution_id",
                             details={"node_execution_id": neid})
    att = backend.attempt(neid)
    if att is None:
        raise AttemptNotLive("unknown attempt", details={"node_execution_id": neid})
    return att


def _refuse_ended(backend: GatewayBackend, neid: str) -> None:
    st = backend.writer.state
    if neid in st.ended or neid not in st.executions:
        raise AttemptNotLive("the attempt has ended", details={"node_execution_id": neid})


Work = Callable[[Any], tuple[dict, list]]


def _idempotent(backend: GatewayBackend, method: str, args: dict[str, Any], work: Work,
                call: CallContext | None) -> dict:
    """Run `work` once per (run, method, idempotency key) in the call's ledger transaction:
    a repeat returns the stored result (`duplicate: true`), other arguments under the same
    key are IDEMPOTENCY_CONFLICT."""
    key, run_id = args["idempotency_key"], backend.run_id
    request_digest = (call.args_digest if call is not None else None) or digest_json(args)

    def fn(tx: Any) -> tuple[dict, list]:
        prior = tx.idempotency_get(run_id, method, key)
        if prior is not None:
            if prior.get("_request_digest") != request_digest:
                raise IdempotencyConflict(
                    f"idempotency key {key!r} of {method} was used for a different request",
                    details={"method": method, "idempotency_key": key})
            return {**prior["result"], "duplicate": True}, []
        result, records = work(tx)
        tx.idempotency_put(run_id, method, key, {"_request_digest": request_digest, "result": result},
                           request_digest=request_digest)
        return {**result, "duplicate": False}, records

    if call is not None and call.tx is not None:
        return fn(call.tx)[0]  # records are applied by the WriterLedger when the transaction commits
    return backend.writer.transact(fn)


def _keys(att: Mapping[str, Any], neid: str) -> dict[str, Any]:
    return {"node_id": att["node_id"], "wave_id": att["wave_id"], "node_execution_id": neid,
            "task_id": att["node_id"]}


def _append(backend: GatewayBackend, tx: Any, topic: str, att: Mapping[str, Any], neid: str, method: str,
            args: Mapping[str, Any], payload: dict[str, Any]) -> Any:
    """One event of a worker call, naming the attempt, the method and its idempotency key."""
    return tx.append(backend.run_id, topic, {"node_execution_id": neid, **payload, "method": method,
                                             "idempotency_key": args["idempotency_key"]}, **_keys(att, neid))


def get_task(backend: GatewayBackend, args: dict, call: CallContext) -> dict:
    neid = args["node_execution_id"]
    att = _live(backend, neid, call)
    out = {"schema_version": SCHEMA_VERSION, "node_execution_id": neid, "node_id": att["node_id"],
           "task": att["task"], "base_ref": att["base_ref"], "base_tree_hash": att["base_tree_hash"]}
    if att.get("wave_id"):
        out["wave_id"] = att["wave_id"]
    resume = resumable(backend, att["node_id"], neid)
    if resume:
        out["resume"] = resume
    return out


RESUME_PREFIX = "resume/"
MAX_RESUME_BYTES = MAX_ARTIFACT_BYTES


def resumable(backend: GatewayBackend, node_id: str, neid: str) -> list[dict[str, Any]]:
    """What earlier attempts of the same node of this run left to resume from: the artifacts they
    put under a `resume/` name (the latest per name), with their bytes, at most MAX_RESUME_BYTES
    in all. The worker checks what they are bound to before it reuses any."""
    latest: dict[str, Any] = {}
    state = getattr(backend.writer, "state", None)
    if state is not None and state.node(node_id).attempts <= 1:
        return []  # this is the node's only attempt: no scan of the run's events (O(1) per first attempt)
    for ev in backend.writer.ledger.events(backend.run_id):
        if ev.topic != rs.ARTIFACT_PUT or ev.node_id != node_id or ev.node_execution_id == neid:
            continue
        name = ev.payload.get("name") or ""
        if name.startswith(RESUME_PREFIX):
            latest[name] = ev
    out: list[dict[str, Any]] = []
    total = 0
    for name, ev in sorted(latest.items()):
        total += int(ev.payload["size"])
        if total > MAX_RESUME_BYTES:
            break
        out.append({"name": name, "digest": ev.payload["digest"], "media_type": ev.payload["media_type"],
                    "node_execution_id": ev.node_execution_id,
                    "content_b64": base64.b64encode(backend.blobs.get(ev.payload["digest"])).decode("ascii")})
    return out


def report_progress(backend: GatewayBackend, args: dict, call: CallContext) -> dict:
    neid = args["node_execution_id"]
    att = _live(backend, neid, call)
    _refuse_ended(backend, neid)

    def work(tx: Any) -> tuple[dict, list]:
        rec = _append(backend, tx, rs.TASK_PROGRESS, att, neid, "report_progress", args,
                      {"fraction": args["fraction"], "message": args.get("message", "")})
        return {"schema_version": SCHEMA_VERSION, "recorded": True}, [rec]

    return _idempotent(backend, "report_progress", args, work, call)


def put_artifact(backend: GatewayBackend, args: dict, call: CallContext) -> dict:
    neid = args["node_execution_id"]
    att = _live(backend, neid, call)
    try:
        data = base64.b64decode(args["content_b64"], validate=True)
    except (binascii.Error, ValueError):
        raise DomeError("content_b64 is not base64", code="INVALID_REQUEST") from None
    if len(data) > backend.max_artifact_bytes:
        raise DomeError("artifact too large", code="ARTIFACT_TOO_LARGE",
                        details={"size": len(data), "limit": backend.max_artifact_bytes})

    def work(tx: Any) -> tuple[dict, list]:
        digest = backend.blobs.put(data)
        if args.get("expected_digest") and args["expected_digest"] != digest:
            raise DomeError("content does not match expected_digest", code="DIGEST_MISMATCH",
                            details={"expected": args["expected_digest"], "actual": digest})
        backend.keep(digest, data)
        rec = _append(backend, tx, rs.ARTIFACT_PUT, att, neid, "put_artifact", args,
                      {"digest": digest, "size": len(data), "media_type": args["media_type"],
                       "name": args.get("name")})
        return {"schema_version": SCHEMA_VERSION, "digest": digest, "size": len(data)}, [rec]

    return _idempotent(backend, "put_artifact", args, work, call)


def resolver_spawn(backend: GatewayBackend, neid: str) -> Mapping[str, Any] | None:
    """The `resolver.spawned` record of attempt `neid`, or None when the coordinator spawned no resolver as it."""
    from ledger.paging import iter_events
    for e in iter_events(backend.writer.ledger, backend.run_id, topics={"resolver.spawned"}):
        if e.payload.get("node_execution_id") == neid:
            return dict(e.payload)
    return None


def check_submission(backend: GatewayBackend, proposal: Mapping[str, Any], att: Mapping[str, Any],
                   neid: str) -> dict[str, Any]:
    """The gateway's check of a submit_patch (integration's verdict is `integration.proposals.check_proposal`):
    verify a submitted PatchProposal against its attempt and its uploaded diff; return the
    diff digest and touched files. Each refusal is a typed error."""
    schema_validate("patch_proposal", proposal)
    if proposal["base_ref"] != att["base_ref"]:
        raise BaseMismatch("proposal base_ref is not the wave base",
                           details={"proposal": proposal["base_ref"], "wave_base": att["base_ref"]})
    if proposal["base_tree_hash"] != att["base_tree_hash"]:
        raise BaseMismatch("proposal base_tree_hash does not match the base commit's tree",
                           details={"proposal": proposal["base_tree_hash"], "base": att["base_tree_hash"]})
    if proposal.get("run_id") != backend.run_id:
        raise ProposalBindingMismatch("proposal is bound to another run",
                                      details={"mismatches": [{"field": "run_id", "claimed": proposal.get("run_id"),
                                                               "grant": backend.run_id}]})
    check_binding(proposal, grant_of(att, neid))
    if any(k in proposal for k in COORDINATOR_FIELDS):  # rare: only then is the ledger read
        check_provenance(proposal, resolver_spawn(backend, neid))
    diff_ref = proposal.get("diff_ref")
    if not diff_ref:
        raise ProposalInvalid("proposal has no diff_ref (upload the canonical diff with put_artifact)")
    raw = backend.artifact(diff_ref)
    try:  # parsed once: the digest is of its canonical form, as integration recomputes it
        check_canonicalization(proposal["diff_canonicalization"])
        parsed = parse_diff(raw)
        desc = {"diff_digest": sha_digest(serialize_diff(parsed)), "touched_files": parsed.touched_files()}
    except DiffError as exc:
        raise ProposalInvalid(f"diff does not parse: {exc.message}", details={"diff_ref": diff_ref}) from None
    if desc["diff_digest"] != proposal["diff_digest"]:
        raise ProposalInvalid("recomputed diff_digest differs", code="DIFF_DIGEST_MISMATCH",
                               details={"claimed": proposal["diff_digest"], "recomputed": desc["diff_digest"]})
    if sorted(desc["touched_files"]) != sorted(proposal["touched_files"]):
        raise ProposalInvalid("touched_files do not match the diff")
    bad = path_policy(desc["touched_files"])
    if bad:
        raise PathDenied("proposal touches denied paths", details={"paths": bad})
    return desc


def submit_patch(backend: GatewayBackend, args: dict, call: CallContext) -> dict:
    neid = args["node_execution_id"]
    att = _live(backend, neid, call)
    _refuse_ended(backend, neid)
    proposal = args["proposal"]
    desc = check_submission(backend, proposal, att, neid)

    def work(tx: Any) -> tuple[dict, list]:
        rec = _append(backend, tx, rs.PATCH_SUBMITTED, att, neid, "submit_patch", args,
                      {"proposal_id": proposal["proposal_id"], "diff_digest": proposal["diff_digest"],
                       "diff_ref": proposal["diff_ref"], "touched_files": desc["touched_files"],
                       "proposal": proposal})
        return {"schema_version": SCHEMA_VERSION, "proposal_id": proposal["proposal_id"],
                "accepted": True, "event_sequence": rec.sequence}, [rec]

    return _idempotent(backend, "submit_patch", args, work, call)


def complete_task(backend: GatewayBackend, args: dict, call: CallContext) -> dict:
    neid = args["node_execution_id"]
    att = _live(backend, neid, call)

    def work(tx: Any) -> tuple[dict, list]:
        _refuse_ended(backend, neid)
        rec = _append(backend, tx, rs.TASK_COMPLETED, att, neid, "complete_task", args,
                      {"outcome": args["outcome"], "summary": args.get("summary", {}),
                       "metrics": args.get("metrics", {}), "evidence": args.get("evidence", []),
                       "proposal_id": args.get("proposal_id"), "error": args.get("error")})
        return {"schema_version": SCHEMA_VERSION, "recorded": True, "event_sequence": rec.sequence}, [rec]

    return _idempotent(backend, "complete_task", args, work, call)


_KEY, _NEID = _key_schema(), _neid_schema()

# name, description, argument schema, handler, side effect (capability class "write" unless named)
TOOLS: tuple[tuple[str, str, dict[str, Any], Callable[..., dict], str], ...] = (
    ("get_task", "The task spec slice and base of this attempt.",
     _closed({"node_execution_id": _NEID}, ["node_execution_id"]), get_task, "none"),
    ("report_progress", "Heartbeat with progress (0..1) and a message.",
     _closed({"idempotency_key": _KEY, "node_execution_id": _NEID,
              "fraction": {"type": "number", "minimum": 0, "maximum": 1},
              "message": {"type": "string", "maxLength": 2000}},
             ["idempotency_key", "node_execution_id", "fraction"]),
     report_progress, "heartbeat"),
    ("put_artifact", "Store bytes in the content-addressed store; returns the digest.",
     _closed({"idempotency_key": _KEY, "node_execution_id": _NEID,
              "media_type": {"type": "string", "minLength": 1, "maxLength": 200},
              "name": {"type": "string", "maxLength": 500},
              "content_b64": {"type": "string"},
              "expected_digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}},
             ["idempotency_key", "node_execution_id", "media_type", "content_b64"]),
     put_artifact, "artifact_put"),
    ("submit_patch", "Register a PatchProposal (its diff uploaded first with put_artifact, or carried).",
     _closed({"idempotency_key": _KEY, "node_execution_id": _NEID, "proposal": {"type": "object"},
              "carried": _carried(["put_artifact"])},
             ["idempotency_key", "node_execution_id", "proposal"]),
     submit_patch, "proposal_register"),
    ("complete_task", "Report the attempt's result (succeeded or failed); spends the grant.",
     _closed({"idempotency_key": _KEY, "node_execution_id": _NEID,
              "outcome": {"enum": ["succeeded", "failed"]},
              "summary": {"type": "object"}, "metrics": {"type": "object"},
              "evidence": {"type": "array", "items": {"type": "object"}},
              "proposal_id": {"type": ["string", "null"]},
              "error": {"type": ["object", "null"]},
              "carried": _carried(["put_artifact", "submit_patch"])},
             ["idempotency_key", "node_execution_id", "outcome"]),
     complete_task, "task_result"),
)


def build_tools(backend: GatewayBackend) -> list[ToolSpec]:
    """The worker tools of one run, bound to its backend."""
    return [ToolSpec(name, text, schema, functools.partial(handler, backend), effect,
                     "read" if name == "get_task" else "write")
            for name, text, schema, handler, effect in TOOLS]
