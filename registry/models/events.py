"""The envelope every ledger record is stored as, and the ControlEvent."""
from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from .base import ArtifactKind, Canonicalization, Digest, Identifier, Kid, OpenModel, Signature, Timestamp

TOPIC_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"


class Envelope(OpenModel):
    nullable: ClassVar[frozenset[str]] = frozenset(
        {"wave_id", "node_id", "node_execution_id", "task_id", "prev_digest", "kid", "signature"})

    schema_version: ArtifactKind
    sequence: int = Field(ge=1)
    event_id: Identifier
    ts: Timestamp
    topic: str = Field(pattern=TOPIC_PATTERN)
    run_id: Identifier
    wave_id: Identifier | None = None
    node_id: Identifier | None = None
    node_execution_id: Identifier | None = None
    task_id: Identifier | None = None
    payload: dict[str, Any]
    payload_digest: Digest
    prev_digest: Digest | None
    canonicalization: Canonicalization
    kid: Kid | None = None
    signature: Signature | None = None
    record_digest: Digest | None = None
    dsse: dict[str, Any] | None = None


class ControlEvent(Envelope):
    """An envelope whose topic is a control-plane fact (see x-dome-known-topics)."""
