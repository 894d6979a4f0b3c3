"""Finished tiles made durable through the gateway, and handed back to a retried attempt.

A tile task puts each tile as soon as it is finished as an artifact
(`resume/litho.tile/<tile id>`, media type MEDIA_TYPE): a JSON record that
binds the raw core to the task (its node id), to the tile folder's pin (the
plan, the layout, the ILT and mask-rule settings: `plan` is the digest of
plan.json) and to the tile, with the core's bytes and digest. Nothing is
shared on disk: the checkout of an attempt is private and goes when it ends.

A retried attempt of the same task gets these artifacts back from the
gateway (`get_task` lists what earlier attempts of its node put under
`resume/`), checks each one and writes it into its tile folder, so the run
optimises only the tiles that were not finished. The cores are the same
bytes, so the stitched mask is the uninterrupted run's. An artifact bound to
another task, plan or tile, or whose bytes do not match its digest, is
refused with TileResumeRefused, never reused.

Test hook: with DOME_LITHO_TEST_EXIT_AFTER_TILES=N in the action's `env`
(or the worker's environment), the worker exits hard (status 75, no result
reported) right after this attempt made the task's N-th tile durable: how
the tests lose a tile worker at a known point. With
DOME_LITHO_TEST_EXIT_FIRST_ATTEMPT=1 the worker exits the same way once its
clean-up, seam windows and evaluations are done, but only in the task's first
attempt: it puts a marker (`resume/litho.lost/<task>`) first, and a retry that
is handed the marker finishes. How the tests lose a clean-up or seam task.
"""
from __future__ import annotations

import base64
import json
import os
from typing import Any, Callable, Sequence

from registry.canonical import digest_bytes

from .errors import TileResumeRefused

KIND = "dome.litho.tile/v1"
MEDIA_TYPE = "application/vnd.dome.litho-tile+json"
NAME_PREFIX = "resume/litho.tile/"
EXIT_HOOK = "DOME_LITHO_TEST_EXIT_AFTER_TILES"
EXIT_FIRST_HOOK = "DOME_LITHO_TEST_EXIT_FIRST_ATTEMPT"
LOST_PREFIX = "resume/litho.lost/"
EXIT_STATUS = 75
_OWN = ("tile_id", "shape", "digest")  # what TileStore.save adds to a record


def encode(task: str, plan: str, tile_id: str, record: dict[str, Any], core: bytes) -> bytes:
    """The artifact of one finished tile."""
    return json.dumps({"kind": KIND, "task": task, "plan": plan, "tile_id": tile_id, "record": record,
                       "core_b64": base64.b64encode(core).decode("ascii")}, sort_keys=True).encode()


def decode(data: bytes, *, task: str, plan: str, wanted: Sequence[str]) -> tuple[str, dict[str, Any], bytes]:
    """(tile id, record, core bytes) of a tile artifact bound to this task, plan and one of the
    wanted tiles; TileResumeRefused otherwise."""
    try:
        doc = json.loads(data)
        core = base64.b64decode(doc["core_b64"], validate=True)
        tile_id, record = doc["tile_id"], dict(doc["record"])
    except (ValueError, KeyError, TypeError) as exc:
        raise TileResumeRefused(f"not a tile record: {exc}") from None
    found = {"kind": doc.get("kind"), "task": doc.get("task"), "plan": doc.get("plan"), "tile_id": tile_id}
    want = {"kind": KIND, "task": task, "plan": plan}
    bad = sorted(k for k, v in want.items() if found[k] != v)
    if tile_id not in wanted:
        bad.append("tile_id")
    if record.get("tile_id") != tile_id or record.get("digest") != digest_bytes(core):
        bad.append("digest")
    if bad:
        raise TileResumeRefused("a finished tile from an earlier attempt does not belong to this task's tile plan",
                                details={"mismatch": bad, "tile_id": tile_id, "task": found["task"],
                                         "expected_task": task, "plan": found["plan"], "expected_plan": plan},
                                hints=["the tile is optimised again only after the mismatch is understood; "
                                       "rerun the task in a new run"])
    return tile_id, record, core


class TileJournal:
    """One tile task's journal: `restore` writes what earlier attempts finished into the tile
    folder; `record` makes a finished tile durable through `put(data, media_type, name)`."""

    def __init__(self, task: str, resume: Sequence[dict[str, Any]] = (),
                 put: Callable[[bytes, str, str], Any] | None = None, exit_after: int | None = None,
                 exit_first: bool = False) -> None:
        self.task = task
        self.exit_first = exit_first and not any(str(r.get("name", "")).startswith(LOST_PREFIX) for r in resume)
        self.resume = [r for r in resume if str(r.get("name", "")).startswith(NAME_PREFIX)]
        self.put = put
        self.exit_after = exit_after
        self.plan = ""
        self.restored: list[str] = []
        self.recorded: list[str] = []

    def restore(self, store, plan: str, wanted: Sequence[str]) -> list[str]:
        """Check every offered tile (all before any is written), then write them into `store`."""
        self.plan = plan
        found = [decode(base64.b64decode(r["content_b64"]), task=self.task, plan=plan, wanted=wanted)
                 for r in self.resume]
        for tile_id, record, core in found:
            if store.info("raw", tile_id) is None:
                store.put_raw("raw", tile_id, core, record)
                self.restored.append(tile_id)
        return sorted(self.restored)

    def record(self, store, tile_id: str) -> None:
        """Put the finished tile's core and record; then the test hook."""
        if self.put is None:
            return
        rec = store.info("raw", tile_id)
        self.put(encode(self.task, self.plan, tile_id, rec, store.raw_bytes("raw", tile_id)), MEDIA_TYPE,
                 NAME_PREFIX + tile_id)
        self.recorded.append(tile_id)
        if self.exit_after and len(self.restored) + len(self.recorded) == self.exit_after:
            os._exit(EXIT_STATUS)


    def after_work(self) -> None:
        """The first-attempt test hook: mark the attempt as lost through the gateway, then exit hard."""
        if self.exit_first and self.put is not None:
            self.put(b"{}", "application/json", LOST_PREFIX + self.task)
            os._exit(EXIT_STATUS)


def exit_first_hook(action_env: dict[str, Any] | None) -> bool:
    return bool((action_env or {}).get(EXIT_FIRST_HOOK) or os.environ.get(EXIT_FIRST_HOOK))


def exit_hook(action_env: dict[str, Any] | None) -> int | None:
    raw = (action_env or {}).get(EXIT_HOOK) or os.environ.get(EXIT_HOOK)
    return int(raw) if raw else None
