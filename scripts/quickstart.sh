#!/usr/bin/env bash
# Set up dome and run its main job on the embedded defaults: inverse lithography
# and mask-rule DRC on ICCAD 2013 clips, promoted with a signed evidence chain,
# verified offline, and reported as HTML.
#   DOME_FULL=1 bash scripts/quickstart.sh   runs all ten clips with the full ILT schedule
#   DOME_SKIP_SETUP=1 ...                    on a machine already set up (the docs' example test)
set -euo pipefail
cd "$(dirname "$0")/.."
# the litho job needs no agent CLI and none of the test-only tools: skip their installs (minutes)
[ -n "${DOME_SKIP_SETUP:-}" ] || DOME_SKIP_AGENT_CLIS=1 DOME_SKIP_TEST_TOOLS=1 bash scripts/setup.sh

queue=examples/iccad13/work.quick.json
[ -n "${DOME_FULL:-}" ] && queue=examples/iccad13/work.queue.json

echo "== building the example repository (examples/iccad13/repo)" >&2
python3 examples/iccad13/make_repo.py --force >/dev/null

echo "== dome run $queue" >&2
set +e
dome run "$queue" --json > ops/quickstart.run.json
status=$?
set -e
run_id=$(python3 -c "import json; print(json.load(open('ops/quickstart.run.json'))['run_id'])")
echo "== run $run_id ended with exit code $status ($(python3 -c "import json; print(json.load(open('ops/quickstart.run.json'))['status'])"))" >&2

echo "== dome verify $run_id" >&2
dome verify "$run_id" || true  # exit 1 only for a broken record; the report and the run's exit code follow anyway
dome report "$run_id" --html ops/report.html
echo "== report: ops/report.html   ledger: ops/dome.db   artifacts: ops/runs/$run_id" >&2
exit "$status"
