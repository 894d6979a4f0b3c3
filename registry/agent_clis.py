"""Agent CLIs from package registries that dome runs in the `agent` slot, pinned.

Each is installed into its own virtual environment under AGENTS_ROOT
(`scripts/install_agent_clis.sh` reads this table), so its dependency pins
never touch dome's own environment. A runtime card names the package, the
version and the environment (`sdk.venv`); the worker reads the installed
version there and refuses a mismatch (RUNTIME_SDK_MISMATCH) before the CLI
starts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

AGENTS_ROOT = Path("/usr/local/lib/dome-agents")


@dataclass(frozen=True)
class AgentCli:
    name: str      # the folder under AGENTS_ROOT
    package: str   # the PyPI package
    version: str   # the pinned version
    command: str   # the executable in the environment's bin/

    @property
    def venv(self) -> Path:
        return AGENTS_ROOT / self.name

    @property
    def executable(self) -> Path:
        return self.venv / "bin" / self.command


AIDER = AgentCli(name="aider", package="aider-chat", version="0.86.2", command="aider")
AGENT_CLIS = {c.name: c for c in (AIDER,)}


def main() -> None:  # `python -m registry.agent_clis`: one line per CLI for the install script
    for c in AGENT_CLIS.values():
        print(c.name, c.package, c.version)


if __name__ == "__main__":
    main()
