"""A tiled layout as a dome work queue: tile batches in parity waves, a stitch task, an evaluation.

`tile_queue(plan, ...)` (pure) gives the tasks and validations:

- one `litho.optimize` task per batch of tiles of one wave (`tiling.tiles`,
  `stitch: false`). A batch depends on the batches of earlier waves that hold
  a neighbour of one of its tiles, so the coordinator's derived base gives it
  exactly the finished cores its halos need; batches of one wave run at once.
- the clean-up runs in the waves, per tile: a tile's clean core reads only its
  own and its neighbours' raw cores. A tile whose neighbours are all of earlier
  waves is cleaned by its own batch (`tiling.clean`), right after its ILT; the
  other tiles of a batch by a `clean-w<wave>-b<batch>` task that depends on the
  batches holding the tiles and their neighbours (with `clean_in_waves=False`
  the stitch task cleans every tile, as before).
- the seam check's re-simulations run in the waves too: `seams-b<k>` tasks,
  each a batch of seam windows (`tiling.seams`), after the tasks that
  optimised and cleaned the tiles under them; each stores a record per window
  (with `seams_in_waves=False`, or without the clean-up in the waves, the
  stitch task re-simulates every window, as before).
- the evaluation runs in the waves too: each seam task also evaluates the
  tiles `evaluated_by` gives its windows (`tiling.evaluate`), after the tasks
  that optimised and cleaned those tiles and their neighbours; the stitch and
  the evaluation task sum those records instead of simulating the mask again
  (with `evaluate_in_waves=False` they simulate it, as before).
- one `litho.optimize` stitch task (depends on every batch): every tile is in
  its checkout already, none is redone, and every clean core too; it
  assembles the mask, writes it with its metrics report (`*.litho.json`),
  and judges the seams from the windows' records and the tiles' own prints.
- one `litho.evaluate` task on the full layout and the stitched mask (depends
  on the stitch; `tiles` names the tile folder whose evaluation records it
  sums): its report lists `violations[]`, deduplicated across tiles
  (canonical and shadow records with `violation_group_id`).
- the `litho.resim` validation re-simulates the committed mask over the whole
  layout, once, and must reproduce every figure of the stitch's report and of
  the evaluation's (metrics, each tile's scores, the violations): the records
  the seam tasks' workers wrote are not trusted for the result.

Order. The coordinator's scheduler dispatches the ready task that blocks the
most later work first (its transitive dependents), then the one whose
resource key (container images, capabilities) is rarest. Here a wave's
tiles are batched most-blocking first (`tile_blocking`), so those batches
carry the most dependents, and each task's `priority_group` is its wave, so
among equals an earlier wave goes first.

A lost tile worker is retried as its task (the coordinator's attempts); the
retry receives the tiles the lost attempt finished (tilejournal) and
optimises only the rest; the tiles of every finished task are never redone.
Cancelling the run stops every tile task.
"""
from __future__ import annotations

from typing import Any

from .resim import EVALUATE_SUFFIX
from .tiled import TilePlan, seam_tiles, seam_windows


def tile_blocking(plan: TilePlan) -> dict[str, int]:
    """Per tile, how many tiles of later waves wait for it, directly or through others (a tile
    of a later wave waits for its neighbours of earlier waves). Pure."""
    wave = {t.tile_id: plan.wave_of(t) for t in plan.tiles}
    later: dict[str, list[str]] = {t.tile_id: [u.tile_id for u in plan.neighbours(t) if wave[u.tile_id] > wave[t.tile_id]]
                                   for t in plan.tiles}
    reach: dict[str, int] = {}
    bit = {t.tile_id: 1 << k for k, t in enumerate(plan.tiles)}
    for t in sorted(plan.tiles, key=lambda t: -wave[t.tile_id]):  # later waves first
        acc = 0
        for u in later[t.tile_id]:
            acc |= bit[u] | reach[u]
        reach[t.tile_id] = acc
    return {tid: bin(r).count("1") for tid, r in reach.items()}


def batches(plan: TilePlan, batch_size: int) -> list[tuple[int, list[str]]]:
    """(wave, tile ids) per batch: each wave's tiles most-blocking first (row-major among equals),
    cut into batches, so the batches that hold up the most later work come first."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    blocking = tile_blocking(plan)
    out = []
    for w, wave in enumerate(plan.waves()):
        ids = [t.tile_id for t in sorted(wave, key=lambda t: (-blocking[t.tile_id], t.row, t.col))]
        for i in range(0, len(ids), batch_size):
            out.append((w, ids[i:i + batch_size]))
    return out


def _cleanable_in_batch(plan: TilePlan, tile_id: str) -> bool:
    """Every neighbour of the tile is of an earlier wave: its batch's checkout holds them all."""
    t = plan.tile(tile_id)
    return all(plan.wave_of(u) < plan.wave_of(t) for u in plan.neighbours(t))


def evaluated_by(plan: TilePlan) -> dict[str, str]:
    """Per tile, the seam window whose task evaluates it: the window at its row and column, clamped
    to the windows' grid (the last row and column of tiles have no window of their own). Pure."""
    windows = seam_windows(plan)
    if not windows:
        return {}
    rmax = max(s.row for s in windows)
    cmax = max(s.col for s in windows)
    return {t.tile_id: f"S_{min(t.row, rmax)}_{min(t.col, cmax)}" for t in plan.tiles}


def _seam_tasks(plan: TilePlan, tasks: list[dict[str, Any]], by_tile: dict[str, str], common: dict[str, Any],
                tile_dir: str, batch_size: int, timeout_s: int, evaluate: bool) -> list[dict[str, Any]]:
    """Seam windows in batches, each task after the tasks that optimised and cleaned the tiles
    under its windows: the re-simulations of the seam check run in the waves. With `evaluate`,
    each task also evaluates the tiles `evaluated_by` gives its windows, after the tasks that
    optimised and cleaned those tiles and their neighbours."""
    cleaner = {tid: t["node_id"] for t in tasks for tid in t["action_spec"]["params"]["tiling"].get("clean", [])}
    out = []
    windows = seam_windows(plan)
    evaluator = evaluated_by(plan) if evaluate else {}
    for k in range(0, len(windows), batch_size):
        part = windows[k:k + batch_size]
        under = sorted({u.tile_id for s in part for u in seam_tiles(plan, s)})
        mine = {s.tile_id for s in part}
        judged = sorted(tid for tid, sid in evaluator.items() if sid in mine)
        read = set(under) | {u.tile_id for tid in judged for u in (plan.tile(tid), *plan.neighbours(plan.tile(tid)))}
        need = sorted({by_tile[tid] for tid in read} | {cleaner[tid] for tid in read})
        out.append({
            "node_id": f"seams-b{k // batch_size}", "description": f"seam windows {', '.join(s.tile_id for s in part)}",
            "priority_group": 4, "required_capabilities": ["write"],
            "required_outputs": ["patch_proposal", "evidence:litho"], "containers": [], "dependencies": need,
            "risk": "low", "timeout_s": timeout_s,
            "action_spec": {"intent": "litho.optimize", "params": {
                **common, "tiling": {"dir": tile_dir, "tiles": under, "stitch": False,
                                     "seams": [s.tile_id for s in part], **({"evaluate": judged} if judged else {})}}}})
    return out


def tile_queue(plan: TilePlan, *, layout: str, out: str, tile_dir: str, kernels: str, name: str,
               batch_size: int = 2, iterations: int | None = None, mrc: dict[str, Any] | None = None,
               promote_to: str = "refs/heads/masks", evaluate_level: str = "detailed",
               max_parallel: int = 2, timeout_s: int = 1800, repo: str = "repo",
               endgame_max_duplicates: int = 1, clean_in_waves: bool = True, seams_in_waves: bool = True,
               evaluate_in_waves: bool = True, validations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The work queue (dome.work.queue/v1) that optimises, stitches and checks a tiled layout."""
    # one seed for every task: the tile folder is bound to the ILT settings, the seed included
    common: dict[str, Any] = {"layout": layout, "out": out, "kernels": kernels, "fill": plan.fill, "seed": 0}
    if iterations:
        common["iterations"] = int(iterations)
    if mrc:
        common["mrc"] = dict(mrc)
    by_tile: dict[str, str] = {}
    tasks: list[dict[str, Any]] = []
    parts = batches(plan, batch_size)
    for k, (wave, ids) in enumerate(parts):
        node = f"tiles-w{wave}-b{k}"
        need = sorted({by_tile[u.tile_id] for tid in ids for u in plan.neighbours(plan.tile(tid))
                       if u.tile_id in by_tile})
        tiling: dict[str, Any] = {"dir": tile_dir, "tiles": ids, "stitch": False}
        own = [tid for tid in ids if clean_in_waves and _cleanable_in_batch(plan, tid)]
        if own:
            tiling["clean"] = own
        tasks.append({
            "node_id": node, "description": f"tiled ILT, wave {wave}: {', '.join(ids)}", "priority_group": wave,
            "required_capabilities": ["write"], "required_outputs": ["patch_proposal", "evidence:litho"],
            "containers": [], "dependencies": need, "risk": "low", "timeout_s": timeout_s,
            "action_spec": {"intent": "litho.optimize", "params": {**common, "tiling": tiling}}})
        for tid in ids:
            by_tile[tid] = node
    for k, (wave, ids) in enumerate(parts):
        rest = [tid for tid in ids if clean_in_waves and not _cleanable_in_batch(plan, tid)]
        if not rest:
            continue
        need = sorted({by_tile[u.tile_id] for tid in rest for u in (plan.tile(tid), *plan.neighbours(plan.tile(tid)))})
        tasks.append({
            "node_id": f"clean-w{wave}-b{k}", "description": f"mask clean-up, wave {wave}: {', '.join(rest)}",
            "priority_group": wave, "required_capabilities": ["write"],
            "required_outputs": ["patch_proposal", "evidence:litho"], "containers": [], "dependencies": need,
            "risk": "low", "timeout_s": timeout_s,
            "action_spec": {"intent": "litho.optimize", "params": {
                **common, "tiling": {"dir": tile_dir, "tiles": rest, "stitch": False, "clean": rest}}}})
    if clean_in_waves and seams_in_waves:
        tasks += _seam_tasks(plan, tasks, by_tile, common, tile_dir, batch_size, timeout_s, evaluate_in_waves)
    tile_nodes = [t["node_id"] for t in tasks]
    tasks.append({
        "node_id": "stitch", "description": "assemble the clean tiles into the mask (no tile is redone), seam check",
        "required_capabilities": ["write"], "required_outputs": ["patch_proposal", "evidence:litho"],
        "containers": [], "dependencies": tile_nodes, "risk": "low", "timeout_s": timeout_s,
        "action_spec": {"intent": "litho.optimize", "params": {
            **common, "tiling": {"dir": tile_dir, "stitch": True}}}})
    report = out.rsplit(".", 1)[0] + EVALUATE_SUFFIX  # the name litho.resim knows an evaluation report by
    tasks.append({
        "node_id": "evaluate", "description": "full-layout evaluation of the stitched mask, violations deduplicated across tiles",
        "required_capabilities": ["write"], "required_outputs": ["evidence:litho"],
        "containers": [], "dependencies": ["stitch"], "risk": "low", "timeout_s": timeout_s,
        "action_spec": {"intent": "litho.evaluate", "params": {
            "layout": layout, "mask": out, "kernels": kernels, "fill": plan.fill, "report_level": evaluate_level,
            "out": report, "tiles": tile_dir}}})
    # A straggling tile task holds back every later wave, not only the run's last tasks: the
    # endgame covers the whole queue, so a tile task gets a duplicate whenever nothing else is
    # ready and a slot is free (it receives the tiles the straggler made durable and redoes only
    # the rest). Stitch and evaluation are never duplicated.
    scheduling: dict[str, Any] = {"max_parallel": max_parallel, "endgame_max_duplicates": endgame_max_duplicates,
                                  "default_max_attempts": 2}
    if endgame_max_duplicates:
        scheduling["endgame_threshold"] = len(tasks)
        for task in tasks[-2:]:
            task["endgame_duplicates"] = 0
    return {
        "artifact_kind": "dome.work.queue/v1",
        "name": name,
        "description": f"Tiled inverse lithography of {layout}: {len(plan.tiles)} tiles in {len(plan.waves())} "
                       f"parity waves, stitched, evaluated and re-simulated before promotion.",
        "repo": repo,
        "base_ref": "main",
        "determinism_seed": 2013,
        "policy": "default",
        "promote_to": promote_to,
        "scheduling": scheduling,
        "tasks": tasks,
        "validations": [
            {"suite": "litho.resim", "name": "litho_resim", "params": {"kernels": kernels},
             "required": True, "timeout_s": timeout_s},
            *(validations or []),
        ],
    }
