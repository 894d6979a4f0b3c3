#!/usr/bin/env bash
# Set up dome on a fresh Debian/Ubuntu machine: system tools, then the package, then the tools the
# test suite uses (PostgreSQL, podman and the worker image, the MCP Inspector), so that
# `python -m pytest -q` afterwards skips nothing.
# Idempotent; safe to run again. Set DOME_SKIP_APT=1 to skip system packages,
# DOME_SKIP_AGENT_CLIS=1 to skip the agent CLIs (only the agent tests and examples use them),
# DOME_SKIP_TEST_TOOLS=1 to skip what only the tests use (the quickstart does).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
test_tools=1; [ -n "${DOME_SKIP_TEST_TOOLS:-}" ] && test_tools=""

need_apt=()
command -v klayout >/dev/null 2>&1 || need_apt+=(klayout)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v git >/dev/null 2>&1 || need_apt+=(git)
if [ -n "$test_tools" ]; then
  # the container executor's tests: podman, mmdebstrap for the image's root file system, runc for
  # hosts whose cgroups crun refuses; the ledger's PostgreSQL tests: a server (Debian keeps its
  # binaries off PATH); the MCP Inspector and the Qwen Code agent CLI: npm; a real Prometheus server scrapes `dome serve` in tests/observe
  for tool in podman mmdebstrap runc npm prometheus; do command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool"); done
  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    need_apt+=(postgresql)
  fi
fi
if [ "${#need_apt[@]}" -gt 0 ] && [ -z "${DOME_SKIP_APT:-}" ]; then
  echo "setup: installing system packages: ${need_apt[*]}" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >&2
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

if [ -n "$test_tools" ]; then
  # The MCP Inspector (tests/mcp/test_inspector.py), pinned.
  if ! command -v mcp-inspector >/dev/null 2>&1; then
    $SUDO npm install -g --no-fund --no-audit --loglevel=error @modelcontextprotocol/inspector@2.12.0 >&2
  fi
  # The worker image of the container tests, built from a Debian root file system without a
  # registry pull. build.sh caches it (~/.cache/dome/image): the tests call it again and get the
  # same ref at once, so they need no $DOME_WORKER_IMAGE.
  echo "setup: worker image $(bash ops/container/build.sh --variant ci)" >&2
fi
echo "setup: done" >&2
