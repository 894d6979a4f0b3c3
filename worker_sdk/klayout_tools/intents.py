"""Worker intents for DRC: `drc.run` (work queue) and the `drc` validation suite.

drc.run action (closed, registry/schemas/klayout/drc_run.action.json):
    {"intent": "drc.run", "deck": "builtin:mask_rules" | "<path in the checkout>",
     "script_type": "ruby" | "python", "layout": "<path in the checkout>", "top_cell": "TOP",
     "params": {"NAME": "value"}, "write_to": "<dir in the checkout>"}
It runs the deck on the layout in the scratch checkout and stores the .lyrdb
report and the violations JSON as evidence (ctx.put_artifact). Only with
`write_to` does it also write them into the checkout (and so the proposal).

drc suite action (registry/schemas/klayout/drc_suite.action.json):
    {"suite": "drc", "deck": ..., "script_type": ..., "layouts": ["a.gds", ...],
     "top_cell": ..., "params": {...}}
summary.passed is true iff every layout has zero markers.

Paths are relative to the checkout and may not leave it (symlinks included);
built-in decks are named "builtin:mask_rules". Sessions and run directories
live in a private temporary artifact root removed afterwards.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from registry import schema_store
from registry.canonical import canonical_json
from registry.errors import SchemaValidationError

from . import api, drc
from .config import BUILTIN_DECKS, Config, Limits
from .deck_library import DECKS
from .errors import InvalidTarget
from .paths import resolve_allowed
from .sessions import SessionStore

from worker_sdk.intents import IntentContext, IntentResult


def _validate(name: str, action: dict[str, Any]) -> None:
    try:
        schema_store.validate(f"klayout/{name}.action", action)
    except SchemaValidationError as exc:
        raise InvalidTarget(f"invalid {name} action: {exc.message}", details=exc.details) from exc


def _config(scratch: Path, artifact_root: Path) -> Config:
    env = Config.from_env()
    return Config(artifact_root=artifact_root, ttl_seconds=86_400.0, klayout_bin=env.klayout_bin,
                  allowed_roots=(scratch.resolve(), BUILTIN_DECKS), drc_timeout_seconds=env.drc_timeout_seconds,
                  limits=Limits())


def _in_checkout(scratch: Path, rel: str, field: str, roots: tuple[Path, ...]) -> Path:
    if os.path.isabs(rel):
        raise InvalidTarget(f"{field} must be relative to the checkout", details={"field": field, "path": rel})
    return resolve_allowed(str(scratch.resolve() / rel), roots, field=field)


def _deck(scratch: Path, action: dict[str, Any], roots: tuple[Path, ...]) -> tuple[Path, str]:
    deck = action["deck"]
    if deck.startswith("builtin:"):
        name = deck.split(":", 1)[1]
        if name != "mask_rules":
            raise InvalidTarget(f"no built-in deck {name!r}", details={"deck": deck, "builtin": ["mask_rules"]})
        script_type = action.get("script_type", "python")
        return DECKS[script_type], script_type
    path = _in_checkout(scratch, deck, "deck", roots)
    return path, action.get("script_type", "python" if path.suffix == ".py" else "ruby")


def _run_one(ctx: Any, store: SessionStore, layout_rel: str, deck: Path, script_type: str,
             params: dict[str, str], top_cell: str | None) -> dict[str, Any]:
    cfg = store.config
    layout_path = _in_checkout(ctx.scratch, layout_rel, "layout", cfg.allowed_roots)
    req: dict[str, Any] = {"path": str(layout_path)}
    if top_cell:
        req["top_cell"] = top_cell
    opened = api.open_layout(req, store=store)
    sid = opened["session_id"]
    try:
        session = store.get(sid)
        with session.lock:
            record, rc, rule_counts, duration = drc.run_deck(session, deck, script_type, params, cfg,
                                                             token=ctx.token)
        markers = api.extract_markers({"session_id": sid, "run_id": record.run_id}, store=store)
        report = record.report_path.read_bytes()
    finally:
        store.close(sid)
    violations_doc = {"schema_version": markers["violations_schema_version"], "layout": layout_rel,
                      "layout_sha256": opened["source"]["sha256"], "top_cell": opened["selected_top_cell"],
                      "deck": deck.name, "deck_sha256": record.deck_sha256, "script_type": script_type,
                      "params": params, "marker_count": sum(rule_counts.values()), "rule_counts": rule_counts,
                      "violations": markers["violations"]}
    return {"layout": layout_rel, "report": report, "violations": violations_doc, "duration_s": duration,
            "marker_count": sum(rule_counts.values()), "rule_counts": rule_counts}


def _evidence(ctx: Any, one: dict[str, Any]) -> list[dict[str, Any]]:
    report_digest = ctx.put_artifact(one["report"], "application/x-klayout-rdb+xml")
    viol_bytes = canonical_json(one["violations"])
    viol_digest = ctx.put_artifact(viol_bytes, "application/json")
    return [{"kind": "drc_report", "layout": one["layout"], "digest": report_digest,
             "media_type": "application/x-klayout-rdb+xml", "bytes": len(one["report"])},
            {"kind": "drc_violations", "layout": one["layout"], "digest": viol_digest,
             "media_type": "application/json", "bytes": len(viol_bytes),
             "marker_count": one["marker_count"]}]


class _PrivateRoot:
    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix="dome-drc-"))
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def run_drc(ctx: Any) -> Any:
    action = ctx.action
    _validate("drc_run", action)
    started = time.monotonic()
    with _PrivateRoot() as root:
        cfg = _config(ctx.scratch, root)
        store = SessionStore(lambda: cfg)
        deck, script_type = _deck(ctx.scratch, action, cfg.allowed_roots)
        ctx.progress(0.05, f"running {deck.name} on {action['layout']}")
        one = _run_one(ctx, store, action["layout"], deck, script_type, dict(action.get("params", {})),
                       action.get("top_cell"))
    evidence = _evidence(ctx, one)
    if "write_to" in action:
        out_dir = ctx.scratch.resolve() / action["write_to"]
        if ctx.scratch.resolve() not in out_dir.resolve().parents and out_dir.resolve() != ctx.scratch.resolve():
            raise InvalidTarget("write_to leaves the checkout", details={"write_to": action["write_to"]})
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "report.lyrdb").write_bytes(one["report"])
        (out_dir / "violations.json").write_text(json.dumps(one["violations"], indent=2, sort_keys=True) + "\n")
    ctx.progress(1.0, f"{one['marker_count']} markers")
    summary = {"layout": action["layout"], "deck": deck.name, "script_type": script_type,
               "marker_count": one["marker_count"], "rule_counts": one["rule_counts"],
               "passed": one["marker_count"] == 0}
    return IntentResult(summary=summary, evidence=evidence,
                        metrics={"marker_count": one["marker_count"], "drc_seconds": round(one["duration_s"], 6),
                                 "wall_seconds": round(time.monotonic() - started, 6)})


def expand_layouts(scratch: Path, entries: list[str]) -> list[str]:
    """Layout paths of a suite; an entry with * ? or [ is a glob in the checkout
    (sorted, so the order is stable), e.g. "masks/*.oas" covers whatever masks
    the stack under validation holds. A glob matching nothing adds nothing; a
    plain path is kept as given (a missing file is a failure)."""
    out: list[str] = []
    for entry in entries:
        if any(ch in entry for ch in "*?["):
            if os.path.isabs(entry) or ".." in Path(entry).parts:
                raise InvalidTarget("a layout glob must stay inside the checkout", details={"layouts": entry})
            out += sorted(str(p.relative_to(scratch)) for p in scratch.glob(entry) if p.is_file())
        else:
            out.append(entry)
    return list(dict.fromkeys(out))


def drc_suite(ctx: Any) -> Any:
    action = ctx.action
    _validate("drc_suite", action)
    started = time.monotonic()
    results = []
    evidence: list[dict[str, Any]] = []
    with _PrivateRoot() as root:
        cfg = _config(ctx.scratch, root)
        store = SessionStore(lambda: cfg)
        deck, script_type = _deck(ctx.scratch, action, cfg.allowed_roots)
        layouts = expand_layouts(ctx.scratch, action["layouts"])
        for n, layout in enumerate(layouts):
            ctx.token.check()
            ctx.progress(n / len(layouts), f"{deck.name} on {layout}")
            one = _run_one(ctx, store, layout, deck, script_type, dict(action.get("params", {})),
                           action.get("top_cell"))
            evidence += _evidence(ctx, one)
            results.append({"layout": layout, "marker_count": one["marker_count"], "rule_counts": one["rule_counts"],
                            "passed": one["marker_count"] == 0})
    total = sum(r["marker_count"] for r in results)
    ctx.progress(1.0, f"{total} markers on {len(results)} layouts")
    return IntentResult(summary={"suite": "drc", "deck": deck.name, "script_type": script_type,
                                 "passed": total == 0, "marker_count": total, "layouts": results},
                        evidence=evidence,
                        metrics={"marker_count": total, "layouts": len(results),
                                 "wall_seconds": round(time.monotonic() - started, 6)})
