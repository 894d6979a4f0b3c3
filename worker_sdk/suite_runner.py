"""Run one validation-suite handler in this (worker) process.

The coordinator dispatches domain suites (`litho.resim`, `drc`) here across a
process boundary: JSON on stdin `{"handler": "module:function", "scratch":
PATH, "action": {...}, "seed": N}`; the handler gets an IntentContext and its
IntentResult is printed as one JSON line `{"summary", "evidence", "metrics"}`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from worker_sdk.cancel import CancellationToken
from worker_sdk.intents import handler_action


def _context(scratch: Path, action: dict, seed: int) -> Any:
    def put_artifact(data: bytes, media_type: str) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def progress(fraction: float, message: str) -> None:
        print(json.dumps({"progress": fraction, "message": message}), file=sys.stderr)

    from worker_sdk.intents import IntentContext

    return IntentContext(scratch=scratch, action=action, seed=seed, token=CancellationToken(),
                         progress=progress, put_artifact=put_artifact)


def main() -> int:
    req = json.loads(sys.stdin.read())
    module, _, func = req["handler"].partition(":")
    handler = getattr(importlib.import_module(module), func)
    result = handler(_context(Path(req["scratch"]), handler_action(dict(req.get("action") or {})),
                              int(req.get("seed", 0))))
    out = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else dict(result)
    print(json.dumps(out, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
