"""The fullchip queues evaluate the whole layout at the detailed level, and the block's streams."""
from __future__ import annotations

import json

from tests.conftest import REPO_ROOT
from worker_sdk.litho.layout import load_layout
from worker_sdk.litho.streaming import wants_streaming

HERE = REPO_ROOT / "examples" / "fullchip"


def test_both_fullchip_queues_list_violations_and_the_block_evaluation_streams():
    for name in ("work.quick.json", "work.queue.json"):
        queue = json.loads((HERE / name).read_text())
        (evaluate,) = [t for t in queue["tasks"] if t["action_spec"]["intent"] == "litho.evaluate"]
        assert evaluate["action_spec"]["params"]["report_level"] == "detailed", name
    # the block's canvas is far above the streaming threshold: its detailed report is made tile by tile
    assert wants_streaming(None, load_layout(HERE / "layouts" / "block.oas"), 2048, 512, "lithobench")
    assert not wants_streaming(None, load_layout(HERE / "layouts" / "block_quick.oas"), 2048, 512, "lithobench")
