#!/usr/bin/env bash
# Stops what tests-e2e/start-clickhouse.sh DATA_DIR started: its servers, then its ZooKeeper; waits until they are gone.
#   usage: tests-e2e/stop-clickhouse.sh DATA_DIR
set -uo pipefail
data="${1:?usage: stop-clickhouse.sh DATA_DIR}"
for pidfile in "$data"/server-*.pid "$data"/zookeeper.pid; do
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$pidfile"
done
exit 0
