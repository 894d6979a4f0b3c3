"""The base every dome model shares, and the field types the schemas define.

String field types take their patterns from registry/schemas/common.json at
import time, so a model and its schema cannot disagree about what a digest
or an id looks like.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_serializer, model_validator

from ..schema_store import load_schema

_DEFS: dict[str, Any] = load_schema("common")["$defs"]


def _pattern_str(name: str) -> Any:
    return Annotated[str, StringConstraints(pattern=_DEFS[name]["pattern"])]


Identifier = _pattern_str("identifier")
Digest = _pattern_str("digest")
GitSha = _pattern_str("git_sha")
GitRef = Annotated[str, StringConstraints(pattern=_DEFS["git_ref"]["pattern"], min_length=1, max_length=256)]
PinnedRef = _pattern_str("pinned_ref")
ImageRef = _pattern_str("image_ref")
Timestamp = _pattern_str("timestamp")
Kid = _pattern_str("kid")
Signature = _pattern_str("signature")
ArtifactKind = _pattern_str("artifact_kind")
Version = _pattern_str("version")
Capability = _pattern_str("capability")
Method = _pattern_str("method")
Seed = Annotated[int, Field(ge=0, le=2**53 - 1)]
NonNegInt = Annotated[int, Field(ge=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Canonicalization = Literal["rfc8785-jcs"]
Atomicity = Literal["atomic_proposal", "atomic_file", "hunk_ok"]
RiskClass = Literal["low", "medium", "high", "critical"]


def _no_duplicates(value: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in value:
        if item in seen:
            raise ValueError(f"duplicate item {item!r}")
        seen.append(item)
    return value


def unique_list(item: Any) -> Any:
    """list[item] whose items are all different (JSON Schema uniqueItems)."""
    return Annotated[list[item], AfterValidator(_no_duplicates), Field(json_schema_extra={"uniqueItems": True})]


def tie_break(keys: list[str]) -> Any:
    """A list field that must equal `keys` exactly (the spec's tie-break order)."""

    def _check(value: list[str]) -> list[str]:
        if value != keys:
            raise ValueError(f"tie_break_order must be {keys}")
        return value

    return Annotated[list[str], AfterValidator(_check), Field(json_schema_extra={"const": keys})]


class DomeModel(BaseModel):
    """Strict (no type coercion), closed unless a subclass opens it.

    Optional fields are `T | None = None` in Python, but JSON null is refused
    for them unless the field's alias is in `nullable`, exactly like the
    schema (use `Model.make(...)` where None should mean absent); serializing drops
    unset optional fields instead of writing null.
    """

    model_config = ConfigDict(strict=True, extra="forbid", validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)
    nullable: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def make(cls, **fields: Any) -> Any:
        """Build from Python code where None means "absent" (not JSON null).

        (Overriding __init__ instead would also change model_validate, which
        pydantic routes through a custom __init__.)"""
        return cls(**{k: v for k, v in fields.items() if v is not None or k in cls.nullable})

    @model_validator(mode="before")
    @classmethod
    def _refuse_null(cls, data: Any) -> Any:
        if isinstance(data, dict):
            names = {f.alias or n for n, f in cls.model_fields.items()} | set(cls.model_fields)
            bad = [k for k, v in data.items() if v is None and k in names and k not in cls.nullable]
            if bad:
                raise ValueError(f"null is not allowed for {sorted(bad)}")
        return data

    @model_serializer(mode="wrap")
    def _drop_nulls(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k in self.nullable}
        return data

    def to_json_obj(self) -> dict[str, Any]:
        """The JSON object form (aliases, unset optional fields left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @classmethod
    def from_json_obj(cls, data: Any) -> "DomeModel":
        return cls.model_validate(data)


class OpenModel(DomeModel):
    """A response-like object: unknown fields are kept, not refused."""

    model_config = ConfigDict(extra="allow")


class ArtifactHeader(OpenModel):
    """The header fields of every artifact (spec section 1)."""

    artifact_kind: ArtifactKind
    version: Version
    object_id: Identifier
    run_id: Identifier
    wave_id: Identifier | None = None
    task_id: Identifier | None = None
    node_id: Identifier | None = None
    node_execution_id: Identifier | None = None
    base_ref: GitSha | None = None
    base_tree_hash: GitSha | None = None
    created_at: Timestamp
    producer: Identifier
    subject: Identifier | None = None
    determinism_seed: Seed | None = None
    inputs_hash: Digest | None = None
    payload_digest: Digest | None = None
    canonicalization: Canonicalization | None = None
    kid: Kid | None = None
    signature: Signature | None = None

    @model_validator(mode="after")
    def _integrity_fields_come_together(self) -> "ArtifactHeader":
        if self.payload_digest is not None and self.canonicalization is None:
            raise ValueError("payload_digest needs canonicalization")
        if self.signature is not None and (self.kid is None or self.payload_digest is None):
            raise ValueError("signature needs kid and payload_digest")
        if self.kid is not None and self.signature is None:
            raise ValueError("kid needs signature")
        return self


def require_one_of(obj: BaseModel, *names: str) -> None:
    if all(getattr(obj, n) is None for n in names):
        raise ValueError(f"one of {list(names)} is required")
