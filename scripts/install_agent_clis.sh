#!/usr/bin/env bash
# Install the agent CLIs dome runs in the `agent` slot (registry/agent_clis.py), each
# pinned, each in its own virtual environment under /usr/local/lib/dome-agents, so their
# dependencies never disturb dome's. Idempotent: an environment already at the pinned
# version is left alone. Set DOME_AGENTS_ROOT to install elsewhere (cards then name that path).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ROOT=${DOME_AGENTS_ROOT:-/usr/local/lib/dome-agents}
SUDO=""; [ -w "$(dirname "$ROOT")" ] || [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO mkdir -p "$ROOT"
"$PY" -m registry.agent_clis | while read -r name package version; do
  venv="$ROOT/$name"
  have=$("$venv/bin/python" -c "from importlib.metadata import version; print(version('$package'))" 2>/dev/null || true)
  if [ "$have" = "$version" ]; then
    continue
  fi
  echo "agents: installing $package==$version into $venv" >&2
  $SUDO "$PY" -m venv --clear "$venv"
  $SUDO "$venv/bin/python" -m pip install -q --disable-pip-version-check "$package==$version" >&2
done
