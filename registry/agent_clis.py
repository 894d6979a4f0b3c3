"""Agent CLIs from package registries that dome runs in the `agent` slot, pinned.

Each is installed into a directory of its own under AGENTS_ROOT
(`scripts/install_agent_clis.sh` reads this table): a Python virtual
environment for a PyPI package, an npm prefix for an npm package, so their
dependency pins never touch dome's own environment. A runtime card names the
package (`npm:<name>` for npm), the version and that directory
(`sdk.install_dir`); the worker reads the installed version there and
refuses a mismatch (RUNTIME_SDK_MISMATCH) before the CLI starts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

AGENTS_ROOT = Path("/usr/local/lib/dome-agents")


@dataclass(frozen=True)
class AgentCli:
    name: str      # the folder under AGENTS_ROOT
    registry: str  # pypi | npm
    package: str   # the package's name in its registry
    version: str   # the pinned version
    command: str   # the executable the package installs

    @property
    def install_dir(self) -> Path:
        return AGENTS_ROOT / self.name

    @property
    def executable(self) -> Path:
        sub = "bin" if self.registry == "pypi" else "node_modules/.bin"
        return self.install_dir / sub / self.command

    @property
    def card_package(self) -> str:
        """How a runtime card's `sdk.package` names it."""
        return self.package if self.registry == "pypi" else f"npm:{self.package}"


AIDER = AgentCli(name="aider", registry="pypi", package="aider-chat", version="0.86.2", command="aider")
QWEN_CODE = AgentCli(name="qwen-code", registry="npm", package="@qwen-code/qwen-code", version="0.24.4",
                     command="qwen")
AGENT_CLIS = {c.name: c for c in (AIDER, QWEN_CODE)}


def main() -> None:  # `python -m registry.agent_clis`: one line per CLI for the install script
    for c in AGENT_CLIS.values():
        print(c.name, c.registry, c.package, c.version)


if __name__ == "__main__":
    main()
