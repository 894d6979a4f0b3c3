"""The tile journal: finished tiles bound to their task, plan and tile; a mismatch is refused, never reused."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from worker_sdk.litho import tilejournal as tj
from worker_sdk.litho.errors import TileResumeRefused
from worker_sdk.litho.tiled import TileStore

PIN = {"plan": "sha256:" + "1" * 64, "tiles": 3}
PLAN = "sha256:" + "2" * 64


def _finished(tmp_path, tile_id: str = "T_0_0") -> TileStore:
    store = TileStore(tmp_path / "first", PIN)
    core = (np.arange(64 * 64).reshape(64, 64) % 7 == 0).astype(np.uint8)
    store.save("raw", tile_id, core, {"wave": 0, "iterations": 4, "final_loss": 1.5, "seconds": 0.1})
    return store


def _offer(store: TileStore, tile_id: str = "T_0_0", task: str = "tiles-w0-b0", plan: str = PLAN) -> dict:
    data = tj.encode(task, plan, tile_id, store.info("raw", tile_id), store.raw_bytes("raw", tile_id))
    return {"name": tj.NAME_PREFIX + tile_id, "content_b64": base64.b64encode(data).decode()}


def test_a_retried_attempt_restores_the_finished_tile_byte_for_byte(tmp_path):
    first = _finished(tmp_path)
    put = []
    j1 = tj.TileJournal("tiles-w0-b0", [], lambda d, mt, name: put.append((d, mt, name)))
    j1.plan = PLAN
    j1.record(first, "T_0_0")
    assert [(mt, name) for _, mt, name in put] == [(tj.MEDIA_TYPE, "resume/litho.tile/T_0_0")]
    offer = {"name": put[0][2], "content_b64": base64.b64encode(put[0][0]).decode()}
    second = TileStore(tmp_path / "retry", PIN)
    j2 = tj.TileJournal("tiles-w0-b0", [offer, {"name": "patch.diff", "content_b64": ""}])
    assert j2.restore(second, PLAN, ["T_0_0", "T_0_2"]) == ["T_0_0"]
    for suffix in ("npy", "json"):  # the same bytes as the attempt that finished it
        assert (second.root / "raw" / f"T_0_0.{suffix}").read_bytes() == (first.root / "raw" / f"T_0_0.{suffix}").read_bytes()
    assert second.info("raw", "T_0_2") is None


@pytest.mark.parametrize("what", ["task", "plan", "tile", "bytes"])
def test_a_finished_tile_of_another_task_plan_or_tile_is_refused(tmp_path, what):
    first = _finished(tmp_path)
    offer = {"task": lambda: _offer(first, task="tiles-w1-b3"), "plan": lambda: _offer(first, plan="sha256:" + "9" * 64),
             "tile": lambda: _offer(first), "bytes": lambda: _offer(first)}[what]()
    wanted = ["T_0_2"] if what == "tile" else ["T_0_0", "T_0_2"]
    if what == "bytes":  # one bit of the core flipped, the record unchanged
        doc = tj.json.loads(base64.b64decode(offer["content_b64"]))
        core = bytearray(base64.b64decode(doc["core_b64"]))
        core[-1] ^= 1
        doc["core_b64"] = base64.b64encode(bytes(core)).decode()
        offer["content_b64"] = base64.b64encode(tj.json.dumps(doc).encode()).decode()
    second = TileStore(tmp_path / "retry", PIN)
    with pytest.raises(TileResumeRefused) as exc:
        tj.TileJournal("tiles-w0-b0", [offer]).restore(second, PLAN, wanted)
    assert exc.value.code == "LITHO_TILE_RESUME_REFUSED"
    assert {"task": "task", "plan": "plan", "tile": "tile_id", "bytes": "digest"}[what] in exc.value.details["mismatch"]
    assert second.info("raw", "T_0_0") is None  # nothing of it was written


def test_the_exit_hook_reads_the_action_env_first(monkeypatch):
    monkeypatch.delenv(tj.EXIT_HOOK, raising=False)
    assert tj.exit_hook(None) is None and tj.exit_hook({tj.EXIT_HOOK: "2"}) == 2
    monkeypatch.setenv(tj.EXIT_HOOK, "3")
    assert tj.exit_hook({}) == 3
