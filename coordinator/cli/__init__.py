"""The `dome` command line (entry point: coordinator.cli.main)."""
from __future__ import annotations

from typing import Any

# The options every command takes, given before the command (`dome --ops-root DIR run ...`); set
# once per invocation by main._main, read as the defaults of the command's own options. Here, not
# in main.py, because `python -m coordinator.cli.main` loads main.py a second time as __main__.
GLOBAL_OPTIONS: dict[str, Any] = {}
