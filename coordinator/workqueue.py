"""Load and validate work queues (dome.work.queue/v1) into a task graph.

Pure: `parse_work_queue(obj)` takes the JSON value and returns a WorkQueue
or raises a typed error. The schema (registry/schemas/work_queue.json) is
closed; the graph rules and the unrolling of annotated cycles live in
`coordinator.workgraph`.
"""
from __future__ import annotations

import json
import math
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from registry.canonical import digest_json
from registry.errors import SchemaValidationError
from registry.schema_store import validate

from .workgraph import Graph, WorkQueueError, build_graph

ARTIFACT_KIND = "dome.work.queue/v1"


@dataclass(frozen=True)
class WorkQueue:
    raw: Mapping[str, Any]
    digest: str
    graph: Graph
    repo: str
    base_ref: str
    seed: int
    policy: str
    promote_to: str | None
    budgets: Mapping[str, Any] = field(default_factory=dict)
    scheduling: Mapping[str, Any] = field(default_factory=dict)
    limits: Mapping[str, Any] = field(default_factory=dict)
    validations: tuple[Mapping[str, Any], ...] = ()
    if_target_moved: str = "refuse"
    if_tasks_fail: str = "promote_nothing"  # or promote_rest: coordinator/runloop/partial.py
    # set by whoever starts the run, never by the file: why a person must approve any promotion
    # (the MCP front door's ref policy, coordinator/mcp/refpolicy.py)
    human_gate_reasons: tuple[str, ...] = ()
    tool_dirs: tuple[str, ...] = ()  # host folders shown read-only to workers and validations

    @property
    def domain(self) -> str:
        """The policy preset this queue gets (`integration.policy.domain_of`)."""
        from .integration.policy import domain_of
        return domain_of([t["action_spec"]["intent"] for t in self.raw.get("tasks", [])],
                         [v.get("suite") for v in self.validations], self.raw.get("domain"))


MAX_BYTES = 16 * 1024 * 1024  # a work queue is a plan, not data
MAX_DEPTH = 64  # nesting of arrays/objects a work queue may use; deeper is refused, never recursed into
BRANCH_PREFIX = "refs/heads/"


class WorkQueueUnknownField(WorkQueueError, SchemaValidationError):
    """A field the closed schema does not define (named, with a did-you-mean)."""

    code = "WORK_QUEUE_UNKNOWN_FIELD"


def load_work_queue(path: Path | str) -> WorkQueue:
    """Read, decode and parse a work queue file; every failure is a WorkQueueError."""
    path = Path(path)
    if path.is_dir():
        raise WorkQueueError(f"work queue path is a directory: {path}", code="WORK_QUEUE_IS_DIRECTORY",
                             details={"path": str(path)}, hints=["give the path of the .json file itself"])
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
            raise WorkQueueError(f"work queue is not a regular file: {path}", code="WORK_QUEUE_NOT_A_FILE",
                                 details={"path": str(path)})
        if st.st_size > MAX_BYTES:
            raise WorkQueueError(f"work queue is {st.st_size} bytes; at most {MAX_BYTES} are read",
                                 code="WORK_QUEUE_TOO_LARGE", details={"path": str(path), "max_bytes": MAX_BYTES})
        data = path.read_bytes()
    except FileNotFoundError:
        raise WorkQueueError(f"work queue not found: {path}", code="WORK_QUEUE_NOT_FOUND",
                             details={"path": str(path)}) from None
    except OSError as exc:
        raise WorkQueueError(f"work queue cannot be read: {exc.strerror}", code="WORK_QUEUE_UNREADABLE",
                             details={"path": str(path)}) from None
    return parse_work_queue(decode_json(data, source=str(path)))


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number", code="WORK_QUEUE_NOT_FINITE", details={"value": name},
                   hints=["use a finite number (timeouts and limits must be finite)"])


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _no_constant(text)
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _NotJson(f"duplicate key {k!r} in one JSON object", code="WORK_QUEUE_DUPLICATE_KEY",
                           details={"key": k}, hints=["a key may appear once per object; JSON readers "
                                                      "disagree on which copy wins"])
        out[k] = v
    return out


class _NotJson(WorkQueueError):
    code = "WORK_QUEUE_NOT_JSON"


def decode_json(data: bytes, *, source: str = "<input>") -> Any:
    """Strict JSON: UTF-8 only, no duplicate keys, no NaN/Infinity, bounded nesting."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkQueueError(f"work queue is not UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                             code="WORK_QUEUE_NOT_UTF8", details={"path": source, "offset": exc.start}) from None
    depth = _max_depth_text(text)
    if depth > MAX_DEPTH:
        raise _too_deep(depth, source)
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                         parse_float=_finite_float)
    except _NotJson as exc:
        exc.details.setdefault("path", source)
        raise
    except json.JSONDecodeError as exc:
        raise WorkQueueError(f"work queue is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                             code="WORK_QUEUE_NOT_JSON",
                             details={"path": source, "line": exc.lineno, "column": exc.colno}) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer with more digits than Python converts
        raise WorkQueueError(f"work queue is not usable JSON: {exc}", code="WORK_QUEUE_NOT_JSON",
                             details={"path": source}) from None
    return obj


def _too_deep(depth: int, source: str) -> WorkQueueError:
    return WorkQueueError(f"work queue nests {depth} levels deep; at most {MAX_DEPTH} are allowed",
                          code="WORK_QUEUE_TOO_DEEP", details={"path": source, "max_depth": MAX_DEPTH})


def _max_depth_text(text: str) -> int:
    """Deepest bracket nesting outside strings, found without parsing (no recursion)."""
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def _check_values(obj: Any) -> None:
    """Depth and finiteness of an already-parsed value (queues that come from
    elsewhere than a file, e.g. the MCP front door), iteratively."""
    stack: list[tuple[Any, int, str]] = [(obj, 1, "")]
    while stack:
        v, depth, where = stack.pop()
        if isinstance(v, (dict, list)) and depth > MAX_DEPTH:
            raise _too_deep(depth, "<value>")
        if isinstance(v, dict):
            stack.extend((x, depth + 1, f"{where}/{k}") for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, depth + 1, f"{where}/{i}") for i, x in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise WorkQueueError(f"{where or '/'}: {v} is not a finite number", code="WORK_QUEUE_NOT_FINITE",
                                 details={"field": where}, hints=["use a finite number"])


def branch_ref_problem(ref: str) -> str | None:
    """Why `ref` is not a branch ref dome may promote to (git check-ref-format
    rules, under refs/heads/), or None."""
    if not ref.startswith(BRANCH_PREFIX) or len(ref) == len(BRANCH_PREFIX):
        return "promote_to must be a branch ref, refs/heads/<name>"
    if ref.endswith("/") or ref.endswith(".") or "//" in ref:
        return "a ref may not end with '/' or '.', nor contain '//'"
    if ".." in ref or "@{" in ref or ref == "@":
        return "a ref may not contain '..' or '@{'"
    if any(ord(c) < 0x20 or c == "\x7f" or c in " ~^:?*[\\" for c in ref):
        return "a ref may not contain spaces, control characters or any of ~^:?*[\\"
    for part in ref.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "no part of a ref may start with '.' or end with '.lock'"
    return None


def _unknown_fields(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fields the closed schema does not define, each with where it is and the closest known name."""
    import difflib

    from registry.schema_store import validator

    found: list[dict[str, Any]] = []
    pending = list(validator("work_queue").iter_errors(obj))
    while pending:
        err = pending.pop()
        pending.extend(err.context or ())
        if err.validator != "additionalProperties" or not isinstance(err.instance, dict):
            continue
        known = set((err.schema.get("properties") or {}))
        patterns = list((err.schema.get("patternProperties") or {}))
        for name in sorted(set(err.instance) - known):
            if any(re.search(p, name) for p in patterns):
                continue
            where = "/" + "/".join(str(p) for p in err.absolute_path)
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            item = {"field": name, "at": where, "did_you_mean": close[0] if close else None}
            if item not in found:
                found.append(item)
    return sorted(found, key=lambda f: (f["at"], f["field"]))


def parse_work_queue(obj: Any) -> WorkQueue:
    if not isinstance(obj, dict):
        raise WorkQueueError("a work queue is a JSON object", details={"type": type(obj).__name__})
    _check_values(obj)
    unknown = _unknown_fields(obj)
    if unknown:
        first = unknown[0]
        mean = f"; did you mean {first['did_you_mean']!r}?" if first["did_you_mean"] else ""
        raise WorkQueueUnknownField(
            f"unknown field {first['field']!r} at {first['at']}{mean}", details={"unknown_fields": unknown},
            hints=[f"{f['at']}: {f['field']!r} -> {f['did_you_mean']!r}" for f in unknown if f["did_you_mean"]]
            or ["remove fields the schema does not define"])
    validate("work_queue", obj)  # SchemaValidationError lists every schema problem
    problem = branch_ref_problem(obj["promote_to"])
    if problem:
        raise WorkQueueError(f"promote_to {obj['promote_to']!r} is refused: {problem}", code="PROMOTE_TO_INVALID",
                             details={"promote_to": obj["promote_to"]},
                             hints=["name a branch, e.g. \"refs/heads/dome/results\""])
    _check_names(obj)
    graph = build_graph(obj["tasks"], obj.get("scheduling", {}))
    return WorkQueue(
        raw=obj,
        digest=digest_json(obj),
        graph=graph,
        repo=obj["repo"],
        base_ref=obj["base_ref"],
        seed=int(obj["determinism_seed"]),
        policy=obj["policy"],
        promote_to=obj.get("promote_to"),
        budgets=dict(obj.get("budgets", {})),
        limits=dict(obj.get("limits", {})),
        scheduling=dict(obj.get("scheduling", {})),
        validations=tuple(obj.get("validations", [])),
        if_target_moved=str(obj.get("if_target_moved", "refuse")),
        if_tasks_fail=str(obj.get("if_tasks_fail", "promote_nothing")),
        tool_dirs=tuple(obj.get("tool_dirs", [])),
    )


def _check_names(obj: Mapping[str, Any]) -> None:
    """Every intent and validation suite is one the worker knows (registry.intents)."""
    import difflib

    from registry.intents import INTENTS, SUITES

    for kind, table, items in (("intent", INTENTS, [(f"/tasks/{i}/action_spec/intent", t["action_spec"]["intent"])
                                                    for i, t in enumerate(obj["tasks"])]),
                               ("suite", SUITES, [(f"/validations/{i}/suite", v["suite"])
                                                  for i, v in enumerate(obj.get("validations", []))])):
        bad = [(where, name) for where, name in items if name not in table]
        if bad:
            where, name = bad[0]
            close = difflib.get_close_matches(name, sorted(table), n=1, cutoff=0.6)
            raise WorkQueueError(
                f"unknown {kind} {name!r} at {where}" + (f"; did you mean {close[0]!r}?" if close else ""),
                code=f"UNKNOWN_{kind.upper()}", details={"unknown": [{"at": w, "name": n} for w, n in bad],
                                                         "known": sorted(table)},
                hints=[f"known {kind}s: {', '.join(sorted(table))}"])
    from registry.agent_card import RuntimeCardInvalid, check_card

    for i, t in enumerate(obj["tasks"]):  # an agent's runtime card becomes its grant: check it before any work
        if t["action_spec"]["intent"] == "agent":
            a = t["action_spec"]
            try:
                check_card((a.get("params") or {}).get("card") or a.get("card"))
            except RuntimeCardInvalid as exc:
                raise WorkQueueError(f"/tasks/{i}/action_spec: {exc.message}", code=exc.code,
                                     details={"at": f"/tasks/{i}/action_spec", **exc.details}) from None


