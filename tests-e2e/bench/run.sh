#!/usr/bin/env bash
# The benchmark (not a test): builds and installs like the demo, starts the local ClickHouse on tmpfs unless
# CLICKHOUSE_URL is set, and writes the table to tests-e2e/bench/results.md.  BENCH_N / BENCH_RUNS set sample sizes.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
venv="$repo/.venv"
work="$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)"
trap 'if [ -f "$work/server.pid" ]; then kill "$(cat "$work/server.pid")" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
./mvnw -q -B -ntp package -DskipTests
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests-e2e/requirements.txt
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python-shim
if [ -z "${CLICKHOUSE_URL:-}" ]; then
  eval "$(PYTHON="$venv/bin/python" tests-e2e/start-clickhouse.sh "$work")"
  export BENCH_SERVER="local chDB server (tests-e2e/chdb_server), data on $(df --output=fstype "$work" | tail -1)"
fi
export CLICKHOUSE_URL
"$venv/bin/python" tests-e2e/bench/bench_state.py
