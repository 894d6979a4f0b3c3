"""What the `litho.resim` suite compares: every figure a committed report states about a mask,
against the re-simulation of that mask. Pure functions over JSON; `intents.resimulate` finds
the reports and their files and simulates each mask once.

Two kinds of committed report:
- a mask's metrics report (`*.litho.json` naming `layout` and `mask`, written by
  `litho.optimize`): every key of its `metrics`, the mask file's digest, and each tile's
  L2, PVB and EPE markers (`tiling.per_tile`); and, from a second simulation, of the target
  printed as its own mask, the figures it states about the target: `baseline_metrics` and each
  tile's `l2_before_nm2` (what "before" and a tile's gain are measured from);
- an evaluation report (`*.evaluate.json`, or a `*.litho.json` whose `tool` is "evaluate",
  written by `litho.evaluate`): its metrics, `violation_count`, the `violations[]` it lists (the
  engine lists at most the first MAX_VIOLATIONS_PER_RESPONSE and counts all), the degradation
  flags, the rule deck and the engine's provenance without paths.

Equality is exact: the same JSON type and value at every leaf, the order of lists included.
A figure the re-simulation does not give (a key it lacks) is a mismatch; a key the report
leaves out states nothing and is not one.
"""
from __future__ import annotations

import json
from typing import Any

from registry.canonical import digest_json

EVALUATE_SUFFIX = ".evaluate.json"
MISMATCHES_LISTED = 20  # a failed check names this many figures, and counts them all
SHOWN_CHARS = 2000  # a larger value is shown in a check by its digest and length
# the engine's provenance of an evaluation that its re-simulation gives again (paths excepted)
PROVENANCE_FIGURES = ("engine", "engine_version", "model", "fill", "canvas_px", "pixel_nm", "placement_shift_nm",
                      "tiles", "tiled", "threshold", "corners", "process_window", "kernels", "rule_deck", "precision")
EVALUATE_FIGURES = ("report_level", "metrics", "violation_count", "violations", "degraded_to_aggregate",
                    "degraded_reason", "rule_deck")
# the per-tile figures of a stitched report that come from the target, not the mask
TARGET_TILE_FIGURES = frozenset({"l2_before_nm2"})


def tile_halo(report: dict[str, Any], default: int) -> int:
    """The halo of the tile plan a stitched report was evaluated on, so its tiles' scores are
    reproduced on the same tiles; `default` (the evaluation's own) for any other report."""
    plan = (report.get("tiling") or {}).get("plan") if isinstance(report.get("tiling"), dict) else None
    halo = plan.get("halo_px") if isinstance(plan, dict) else None
    return halo if type(halo) is int and 64 <= halo <= 960 else default


class _Absent:
    """A figure the re-simulation does not give."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


def is_evaluation_report(report: Any) -> bool:
    return isinstance(report, dict) and report.get("tool") == "evaluate"


def _without_path(desc: Any) -> Any:
    return {k: v for k, v in desc.items() if k != "path"} if isinstance(desc, dict) else desc


def provenance_figures(prov: Any) -> dict[str, Any]:
    """The reproducible part of an evaluation's provenance (the files by digest, not by path)."""
    if not isinstance(prov, dict):
        return {}
    out = {k: prov[k] for k in PROVENANCE_FIGURES if k in prov}
    for k in ("layout", "mask"):
        if k in prov:
            out[k] = _without_path(prov[k])
    return out


def litho_figures(report: dict[str, Any], resp: dict[str, Any], tiles: list[dict[str, Any]] | None,
                  mask_digest: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(stated, reproduced) for a mask's metrics report."""
    stated: dict[str, Any] = {"metrics": report.get("metrics")}
    got: dict[str, Any] = {"metrics": resp["metrics"]}
    if "mask_file_digest" in report:
        stated["mask_file_digest"], got["mask_file_digest"] = report["mask_file_digest"], mask_digest
    tiling = report.get("tiling")
    if isinstance(tiling, dict) and "per_tile" in tiling:
        rows = tiling["per_tile"]
        stated["tiling.per_tile"] = ([{k: v for k, v in r.items() if k not in TARGET_TILE_FIGURES}
                                      if isinstance(r, dict) else r for r in rows] if isinstance(rows, list) else rows)
        got["tiling.per_tile"] = tiles if tiles is not None else ABSENT
    return stated, got


def states_target_figures(report: dict[str, Any]) -> bool:
    """Whether a mask's metrics report states figures of its target (checked by `target_figures`)."""
    return "baseline_metrics" in report or bool(_target_rows(report))


def _target_rows(report: dict[str, Any]) -> list[Any]:
    tiling = report.get("tiling")
    rows = tiling.get("per_tile") if isinstance(tiling, dict) else None
    if not isinstance(rows, list) or not any(isinstance(r, dict) and TARGET_TILE_FIGURES & r.keys() for r in rows):
        return []
    return rows


def target_figures(report: dict[str, Any], resp: dict[str, Any], tiles: list[dict[str, Any]] | None
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(stated, reproduced) for what a mask's metrics report states about its target, against the
    simulation of the target as its own mask: `baseline_metrics`, and each tile's `l2_before_nm2`
    (with its tile id, in the report's order: the target's tiles are the mask's)."""
    stated: dict[str, Any] = {}
    got: dict[str, Any] = {}
    if "baseline_metrics" in report:
        stated["baseline_metrics"], got["baseline_metrics"] = report["baseline_metrics"], resp["metrics"]
    rows = _target_rows(report)
    if rows:
        keys = ("tile_id", *sorted(TARGET_TILE_FIGURES))
        stated["tiling.per_tile"] = [{k: r[k] for k in keys if k in r} if isinstance(r, dict) else r for r in rows]
        got["tiling.per_tile"] = ([{"tile_id": t["tile_id"], "l2_before_nm2": t["l2_nm2"]} for t in tiles]
                                  if tiles is not None else ABSENT)
    return stated, got


def evaluation_figures(report: dict[str, Any], resp: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(stated, reproduced) for an evaluation report."""
    stated = {k: report[k] for k in EVALUATE_FIGURES if k in report}
    got = {k: resp.get(k, ABSENT) for k in stated}
    if "provenance" in report:
        stated["provenance"] = provenance_figures(report["provenance"])
        got["provenance"] = provenance_figures(resp.get("provenance"))
    if "metrics" not in stated:  # an evaluation report states its metrics; one without them is not vouched for
        stated["metrics"], got["metrics"] = ABSENT, resp["metrics"]
    return stated, got


def _same_leaf(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def differences(figure: str, stated: Any, got: Any, out: list[dict[str, Any]]) -> None:
    """Append {figure, expected, got} for each leaf where `got` differs from `stated`."""
    if isinstance(stated, dict) and isinstance(got, dict):
        for k in stated:
            differences(f"{figure}.{k}" if figure else str(k), stated[k], got.get(k, ABSENT), out)
        return
    if isinstance(stated, list) and isinstance(got, list):
        if len(stated) != len(got):
            out.append({"figure": f"len({figure})", "expected": len(stated), "got": len(got)})
        for i, (a, b) in enumerate(zip(stated, got)):
            differences(f"{figure}[{i}]", a, b, out)
        return
    if isinstance(stated, (dict, list)) or isinstance(got, (dict, list)) or not _same_leaf(stated, got):
        out.append({"figure": figure, "expected": shown(stated), "got": shown(got)})


def shown(value: Any) -> Any:
    """A value as a check shows it: large lists and objects by digest and length."""
    if isinstance(value, _Absent):
        return repr(value)
    if isinstance(value, (dict, list)) and len(json.dumps(value, sort_keys=True)) > SHOWN_CHARS:
        return {"digest": digest_json(value), "items": len(value)}
    return value


def check(report: str, mask: str | None, stated: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """One report's check: passed when every stated figure is reproduced exactly."""
    found: list[dict[str, Any]] = []
    differences("", stated, got, found)
    return {"report": report, "mask": mask, "passed": not found,
            "expected": {k: shown(v) for k, v in stated.items()}, "got": {k: shown(v) for k, v in got.items()},
            "mismatches": found[:MISMATCHES_LISTED], "mismatch_count": len(found)}


def failed(report: str, mask: str | None, reason: str, **details: Any) -> dict[str, Any]:
    """A check that could not compare: the report or its files could not be read."""
    return {"report": report, "mask": mask, "passed": False, "reason": reason, **details}
