#!/usr/bin/env bash
# Runs every test: Java unit and integration (Maven), the local ClickHouse server's, the shim's and the end-to-end
# Meltano tests. Exits non-zero if any suite fails.
#   CLICKHOUSE_URL=http://user:password@host:8123  runs them against that server instead of a local chDB one.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source tests-e2e/setup.sh
work="$(scratch_dir)"
trap 'stop_local_clickhouse "$work"; rm -rf "$work"' EXIT
status=0
step() { printf '\n=== %s\n' "$*"; }

step "Python environment ($venv)"
install_requirements || exit 1

if [ -z "${CLICKHOUSE_URL:-}" ]; then
  step "Local ClickHouse (chDB)"
  start_local_clickhouse "$work" || exit 1
  echo "CLICKHOUSE_URL=$CLICKHOUSE_URL"
fi
export CLICKHOUSE_URL

step "Java: ./mvnw verify"
./mvnw -B -ntp verify || status=1

step "Python shim: install"
install_shim || exit 1

step "pytest: local ClickHouse server, shim, end to end"
"$venv/bin/python" -m pytest -p no:cacheprovider --rootdir "$repo" tests-e2e python-shim/tests -v || status=1

step "Result"
if [ "$status" -eq 0 ]; then echo "All suites passed."; else echo "Some suite FAILED (see above)."; fi
exit "$status"
