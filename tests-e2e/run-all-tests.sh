#!/usr/bin/env bash
# Runs every test: Java unit and integration (Maven), the local ClickHouse server's, the shim's and the end-to-end
# Meltano tests. Exits non-zero if any suite fails.
#   CLICKHOUSE_URL=http://user:password@host:8123  runs them against that server instead of a local chDB one.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="${VENV:-$repo/.venv}"
# The local server's data on tmpfs where there is one: this VM's disk makes every insert cost ~10 ms, not ~2.
work="$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)"
status=0

step() { printf '\n=== %s\n' "$*"; }

cleanup() {
  if [ -f "$work/server.pid" ]; then kill "$(cat "$work/server.pid")" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "Python environment ($venv)"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" || exit 1
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests-e2e/requirements.txt || exit 1

if [ -z "${CLICKHOUSE_URL:-}" ]; then
  step "Local ClickHouse (chDB)"
  eval "$(PYTHON="$venv/bin/python" tests-e2e/start-clickhouse.sh "$work")" || exit 1
  echo "CLICKHOUSE_URL=$CLICKHOUSE_URL"
fi
export CLICKHOUSE_URL

step "Java: ./mvnw verify"
./mvnw -B -ntp verify || status=1

step "Python shim: install"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python-shim || exit 1

step "pytest: local ClickHouse server, shim, end to end"
"$venv/bin/python" -m pytest -p no:cacheprovider --rootdir "$repo" tests-e2e python-shim/tests -v || status=1

step "Result"
if [ "$status" -eq 0 ]; then echo "All suites passed."; else echo "Some suite FAILED (see above)."; fi
exit "$status"
