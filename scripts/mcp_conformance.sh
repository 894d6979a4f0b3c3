#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, Node 22) against
# `dome mcp --http` with the suite's fixture switched on. Prints the pass count; exits non-zero
# when a scenario fails that is not listed as not applicable
# (coordinator/mcp/testing/conformance-not-applicable.yml).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFORMANCE_VERSION="${MCP_CONFORMANCE_VERSION:-0.1.16}"
TOOLS="${DOME_CI_CACHE:-$HOME/.cache/dome-ci}/mcp-conformance-$CONFORMANCE_VERSION"
if [ ! -x "$TOOLS/node_modules/node/bin/node" ] || [ ! -f "$TOOLS/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  mkdir -p "$TOOLS"
  npm install --prefix "$TOOLS" --no-fund --no-audit "node@22" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >&2
fi
NODE="$TOOLS/node_modules/node/bin/node"
WORK="$(mktemp -d)"
PORT="$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
DOME_MCP_CONFORMANCE=1 python -m coordinator.cli.main mcp --http "127.0.0.1:$PORT" --no-auth \
  --ops-root "$WORK/ops" >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  python -c "import socket; socket.create_connection(('127.0.0.1', $PORT), timeout=0.2)" 2>/dev/null && break
  sleep 0.5
done
set +e
PATH="$(dirname "$NODE"):$PATH" timeout 600 "$NODE" "$TOOLS/node_modules/@modelcontextprotocol/conformance/dist/index.js" \
  server --url "http://127.0.0.1:$PORT/mcp" -o "$WORK/results" \
  --expected-failures coordinator/mcp/testing/conformance-not-applicable.yml >"$WORK/out.txt" 2>&1
RC=$?
set -e
sed -n '/=== SUMMARY ===/,$p' "$WORK/out.txt"
python - "$WORK/out.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"^([✓✗]) (\S+):", text, re.M)
na = [l.split("#")[0].strip()[2:] for l in open("coordinator/mcp/testing/conformance-not-applicable.yml")
      if l.strip().startswith("- ")]
passed = sum(1 for mark, _ in rows if mark == "✓")
applicable = [n for _, n in rows if n not in na]
ok_applicable = sum(1 for mark, n in rows if mark == "✓" and n not in na)
print(f"MCP conformance: {passed}/{len(rows)} scenarios passed; "
      f"{ok_applicable}/{len(applicable)} of those for capabilities dome offers ({len(na)} not applicable)")
PY
exit $RC
