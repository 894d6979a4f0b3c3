#!/usr/bin/env bash
# Install the agent CLIs dome runs in the `agent` slot (registry/agent_clis.py), each pinned,
# each in a directory of its own under /usr/local/lib/dome-agents (a virtual environment for a
# PyPI package, an npm prefix for an npm one), so their dependencies never disturb dome's.
# Idempotent: a directory already holding the pinned version is left alone.
# Set DOME_AGENTS_ROOT to install elsewhere (cards then name that path).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ROOT=${DOME_AGENTS_ROOT:-/usr/local/lib/dome-agents}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO mkdir -p "$ROOT"
"$PY" -m registry.agent_clis | while read -r name registry package version; do
  dir="$ROOT/$name"
  if [ "$registry" = pypi ]; then
    have=$("$dir/bin/python" -c "from importlib.metadata import version; print(version('$package'))" 2>/dev/null || true)
  else
    have=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['version'])" \
           "$dir/node_modules/$package/package.json" 2>/dev/null || true)
  fi
  [ "$have" = "$version" ] && continue
  echo "agents: installing $package@$version into $dir" >&2
  if [ "$registry" = pypi ]; then
    $SUDO "$PY" -m venv --clear "$dir"
    $SUDO "$dir/bin/python" -m pip install -q --disable-pip-version-check "$package==$version" >&2
  else
    command -v npm >/dev/null 2>&1 || { echo "agents: npm is needed for $package" >&2; exit 1; }
    $SUDO mkdir -p "$dir"
    $SUDO npm install --prefix "$dir" --no-fund --no-audit --loglevel=error "$package@$version" >&2
  fi
done
