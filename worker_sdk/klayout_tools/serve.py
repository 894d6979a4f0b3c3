"""A JSON-lines worker process for the KLayout tools.

    python -m worker_sdk.klayout_tools.serve

Reads one request per line on stdin, `{"id": ..., "tool": "<name>", "request": {...}}`,
and writes one line per answer on stdout: `{"id": ..., "ok": true, "result": {...}}`
or `{"id": ..., "ok": false, "error": <ErrorObject>}`. Nothing else is written to
stdout (logs go to stderr), so a host can supervise it and keep KLayout's
GIL-holding calls out of its own event loop. Sessions live as long as the process.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from .api import TOOLS
from .errors import InternalError, InvalidTarget, KlayoutToolError


def handle(line: str) -> dict[str, Any]:
    msg_id: Any = None
    try:
        msg = json.loads(line)
        if not isinstance(msg, dict):
            raise InvalidTarget("a message must be a JSON object")
        msg_id = msg.get("id")
        tool = TOOLS.get(msg.get("tool", ""))
        if tool is None:
            raise InvalidTarget(f"unknown tool {msg.get('tool')!r}", details={"tools": sorted(TOOLS)})
        return {"id": msg_id, "ok": True, "result": tool(msg.get("request"))}
    except KlayoutToolError as exc:
        return {"id": msg_id, "ok": False, "error": exc.to_object()}
    except json.JSONDecodeError as exc:
        return {"id": msg_id, "ok": False, "error": InvalidTarget(f"not JSON: {exc}").to_object()}
    except Exception as exc:  # noqa: BLE001 - the loop must survive anything
        return {"id": msg_id, "ok": False, "error": InternalError(repr(exc)).to_object()}


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # anything that prints goes to stderr, never into the protocol
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(handle(line), separators=(",", ":")) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
