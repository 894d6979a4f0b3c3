"""The human gate: single-use consent tokens (`dome promote RUN_ID --consent TOKEN`)."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from ledger.protocols import EventLog
from registry.errors import DomeError
from registry.signing import Keyring, SigningKey

from . import gitio
from .evidence import T_CONSENT, T_CONSENT_REQ, T_PROMOTION, T_REQUIREMENTS, verify_artifact
from .finish import (FinishResult, export_promotion, finish_recorded_promotion, gate_and_promote,
                     recorded_result, token_digest, utc_now)
from .policy import IntegrationPolicy
from .recorder import Emitter, records_of


class ConsentError(DomeError):
    code = "CONSENT_ERROR"


def grant_consent(ledger: EventLog, run_id: str, token: str, *, key: SigningKey, ops_root: Path,
                  keyring: Keyring | None = None, policy: IntegrationPolicy | None = None,
                  approved_by: str = "") -> FinishResult:
    """Spend a consent token (once) and promote the run if the chain is now complete."""
    keyring = keyring or Keyring({key.kid: key.public})
    records = records_of(ledger, run_id)
    digest = token_digest(token)
    reqs = [r for r in records if r.topic == T_CONSENT_REQ]
    if not reqs:
        raise ConsentError(f"run {run_id} is not waiting for consent", code="CONSENT_NOT_REQUESTED")
    match = [r for r in reqs if r.artifact.get("token_digest") == digest]
    if not match:
        raise ConsentError("consent token does not match this run", code="CONSENT_INVALID")
    req = match[-1]
    verify_artifact(req.artifact, keyring)
    spent = [r for r in records if r.topic == T_CONSENT and r.artifact.get("token_digest") == digest]
    if spent:
        done = recorded_result(ledger, run_id)
        repo = Path([r for r in records if r.topic == T_REQUIREMENTS][-1].artifact["repo"])
        if done is not None and done.promotion is not None and done.status == "promoted" \
                and spent[-1].sequence < max(r.sequence for r in records if r.topic == T_PROMOTION) \
                and gitio.ref_target(repo, str(done.promotion["to_ref"])) != done.promotion["from_head_ref"]:
            # this token's promotion was decided but a kill came before the ref moved: finish it
            export_promotion(records, done.promotion, key, ops_root, run_id)
            return finish_recorded_promotion(repo, done)
        raise ConsentError("consent token already used", code="CONSENT_ALREADY_USED")
    if str(req.artifact.get("expires_at", "")) < utc_now()[:19] + "Z":
        raise ConsentError("consent token expired", code="CONSENT_EXPIRED")
    reqrec = [r for r in records if r.topic == T_REQUIREMENTS]
    if not reqrec:
        raise ConsentError("run has no integration requirements record", code="CONSENT_NOT_REQUESTED")
    meta = reqrec[-1].artifact
    emit = Emitter(ledger, run_id, key, utc_now)
    emit(T_CONSENT, {"artifact_kind": "dome.consent/v1", "consent_id": req.artifact["consent_id"],
                     "head_ref": req.artifact["head_ref"], "token_digest": digest,
                     "approved_by": approved_by or "admin"})
    return gate_and_promote(ledger, run_id, repo=Path(meta["repo"]), key=key, keyring=keyring,
                            policy=policy, to_ref=str(meta["promote_to"]), ops_root=ops_root,
                            emit=emit, base_ref=str(meta.get("base_ref", "")), issue_consent=False)
