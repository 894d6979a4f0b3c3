#!/usr/bin/env bash
# Set up dome on a fresh Debian/Ubuntu machine: system tools, then the package.
# Idempotent; safe to run again. Set DOME_SKIP_APT=1 to skip system packages,
# DOME_SKIP_AGENT_CLIS=1 to skip the agent CLIs (only the agent tests and examples use them).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v klayout >/dev/null 2>&1 || need_apt+=(klayout)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v git >/dev/null 2>&1 || need_apt+=(git)
if [ "${#need_apt[@]}" -gt 0 ] && [ -z "${DOME_SKIP_APT:-}" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing system packages: ${need_apt[*]}" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >&2
fi

# a real Prometheus server scrapes `dome serve` in tests/observe (Debian's package)
if ! command -v prometheus >/dev/null 2>&1 && [ -z "${DOME_SKIP_APT:-}" ]; then
  echo "setup: installing system packages: prometheus" >&2
  $( [ "$(id -u)" -eq 0 ] || echo sudo ) apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $( [ "$(id -u)" -eq 0 ] || echo sudo ) apt-get install -y -qq prometheus >&2
fi

PY=${PYTHON:-python3}
# CPU torch, pinned: an unpinned torch pulls several GB of CUDA wheels.
# On a GPU machine install your CUDA build of torch first; this line then does nothing.
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0" >&2
"$PY" -m pip install -q -e ".[litho,ray,agents,otel,test]" >&2
# agent CLIs (aider from PyPI, Qwen Code from npm), pinned, each in a directory of its own
# (a failed install leaves the rest of dome working; its tests then say what is missing)
if [ -z "${DOME_SKIP_AGENT_CLIS:-}" ]; then
  PYTHON="$PY" bash scripts/install_agent_clis.sh || echo "setup: the agent CLIs were not installed" >&2
fi
echo "setup: done" >&2
