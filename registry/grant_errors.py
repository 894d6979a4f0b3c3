"""Typed errors of grant issuance and verification.

Every check of grant verification has its own code, so an operator (and
the adversarial test matrix) can tell exactly which rule refused a call.
They live in registry/ so that the ledger (spend_jti raises GrantReplayed),
the coordinator and worker_sdk share one definition.
"""
from __future__ import annotations

from .errors import DomeError


class GrantError(DomeError):
    """Base of every grant failure. `check` names the verification step."""

    code = "GRANT_ERROR"
    check = "grant"


# ---- verification, in the order the checks run ---------------------------
class GrantMalformed(GrantError):
    code, check = "GRANT_MALFORMED", "signature"


class GrantUnknownKid(GrantError):
    code, check = "GRANT_UNKNOWN_KID", "signature"


class GrantSignatureInvalid(GrantError):
    code, check = "GRANT_SIGNATURE_INVALID", "signature"


class GrantWrongPayloadType(GrantError):
    code, check = "GRANT_WRONG_PAYLOAD_TYPE", "payload_type"


class GrantPayloadInvalid(GrantError):
    code, check = "GRANT_PAYLOAD_INVALID", "payload_type"


class GrantWrongAudience(GrantError):
    code, check = "GRANT_WRONG_AUDIENCE", "audience"


class GrantWrongRun(GrantError):
    code, check = "GRANT_WRONG_RUN", "binding"


class GrantWrongWave(GrantError):
    code, check = "GRANT_WRONG_WAVE", "binding"


class GrantWrongWorker(GrantError):
    code, check = "GRANT_WRONG_WORKER", "binding"


class GrantProofMissing(GrantError):
    code, check = "GRANT_PROOF_MISSING", "binding"


class GrantProofInvalid(GrantError):
    code, check = "GRANT_PROOF_INVALID", "binding"


class GrantProofMismatch(GrantProofInvalid):
    """A valid proof by the worker key, but over another call (method, arguments or idempotency key)."""

    code = "GRANT_PROOF_MISMATCH"


class GrantProofStale(GrantProofInvalid):
    """A valid proof whose timestamp is outside the allowed skew."""

    code = "GRANT_PROOF_STALE"


class GrantProofReplayed(GrantError):
    code, check = "GRANT_PROOF_REPLAYED", "binding"


class GrantNotYetValid(GrantError):
    code, check = "GRANT_NOT_YET_VALID", "time"


class GrantExpired(GrantError):
    code, check = "GRANT_EXPIRED", "time"


class GrantReplayed(GrantError):
    """The jti was already spent (a single-use grant used after its write)."""

    code, check = "GRANT_REPLAYED", "jti"


class GrantRevoked(GrantError):
    code, check = "GRANT_REVOKED", "revocation"


class GrantAdminMethodDenied(GrantError):
    code, check = "GRANT_ADMIN_METHOD_DENIED", "method"


class GrantMethodNotGranted(GrantError):
    code, check = "GRANT_METHOD_NOT_GRANTED", "method"


class GrantBudgetExhausted(GrantError):
    code, check, retry = "GRANT_BUDGET_EXHAUSTED", "budget", "none"


# ---- issuance -------------------------------------------------------------
class GrantIssueError(GrantError):
    code, check = "GRANT_ISSUE_ERROR", "issue"


class AdminNotGrantable(GrantIssueError):
    code = "GRANT_ADMIN_NOT_GRANTABLE"


class UnknownCapability(GrantIssueError):
    code = "GRANT_UNKNOWN_CAPABILITY"


class UnknownPolicy(GrantIssueError):
    code = "GRANT_UNKNOWN_POLICY"


class EmptyGrant(GrantIssueError):
    code = "GRANT_SCOPE_EMPTY"


VERIFY_ERRORS: tuple[type[GrantError], ...] = (
    GrantMalformed, GrantUnknownKid, GrantSignatureInvalid, GrantWrongPayloadType, GrantPayloadInvalid,
    GrantWrongAudience, GrantWrongRun, GrantWrongWave, GrantWrongWorker, GrantProofMissing,
    GrantProofInvalid, GrantProofMismatch, GrantProofStale, GrantProofReplayed, GrantNotYetValid, GrantExpired,
    GrantReplayed, GrantRevoked,
    GrantAdminMethodDenied, GrantMethodNotGranted, GrantBudgetExhausted,
)
