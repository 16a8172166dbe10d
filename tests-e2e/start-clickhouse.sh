#!/usr/bin/env bash
# Starts the local chDB ClickHouse (tests-e2e/chdb-server) in the background and prints `export CLICKHOUSE_URL=…` (with
# the server's user and password: CHDB_SERVER_USER, default "default", and CHDB_SERVER_PASSWORD, default empty).
# Runs it with $PYTHON, else the repository's .venv/bin/python (tests-e2e/setup.sh makes it).
#   usage: tests-e2e/start-clickhouse.sh [--keeper] [--servers N] DATA_DIR [PORT]
#     --keeper      also start an Apache ZooKeeper and give every server KeeperMap tables on it; prints
#                   `export CLICKHOUSE_KEEPER_URLS=url1,url2,…` too
#     --servers N   N servers, each with data of its own (default 1); CLICKHOUSE_URL is the first
#     PORT          the first server's port (0 or absent: a free port); the others take free ports
# Stop everything it started with tests-e2e/stop-clickhouse.sh DATA_DIR. Logs: DATA_DIR/*.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
keeper=0
servers=1
while [ $# -gt 0 ]; do
  case "$1" in
    --keeper) keeper=1; shift ;;
    --servers) servers="${2:?--servers needs a number}"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
data="${1:?usage: start-clickhouse.sh [--keeper] [--servers N] DATA_DIR [PORT]}"
port="${2:-0}"
python="${PYTHON:-$here/../.venv/bin/python}"
if ! "$python" -c 'import chdb_server' 2>/dev/null; then
  echo "$python cannot import chdb_server: run tests-e2e/setup.sh first (it makes .venv), or set PYTHON" >&2
  exit 1
fi
mkdir -p "$data"

# Runs `python -m MODULE ARGS…` in the background as NAME and waits for its first LINES lines of output (NAME.out).
launch() {
  local name="$1" lines="$2"
  shift 2
  rm -f "$data/$name.out"
  nohup "$python" -m "$@" > "$data/$name.out" 2> "$data/$name.log" &
  echo $! > "$data/$name.pid"
  for _ in $(seq 1 1200); do
    if [ "$(wc -l < "$data/$name.out")" -ge "$lines" ]; then return 0; fi
    if ! kill -0 "$(cat "$data/$name.pid")" 2>/dev/null; then
      echo "$name failed to start:" >&2
      cat "$data/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "$name did not start within 120 s" >&2
  return 1
}

config=()
if [ "$keeper" = 1 ]; then
  launch zookeeper 2 chdb_server.zookeeper --data "$data/zookeeper"
  config=(--config "$(sed -n 2p "$data/zookeeper.out")")
fi

credentials="$("$python" -c 'import os, urllib.parse as u
print(":".join(u.quote(os.environ.get(k, d), safe="") for k, d in (("CHDB_SERVER_USER", "default"), ("CHDB_SERVER_PASSWORD", ""))))')"
urls=()
for i in $(seq 1 "$servers"); do
  launch "server-$i" 1 chdb_server --port "$port" --data "$data/server-$i" "${config[@]}"
  url="$(head -n 1 "$data/server-$i.out")"
  urls+=("${url/:\/\//://$credentials@}")
  port=0
done
echo "export CLICKHOUSE_URL=${urls[0]}"
if [ "$keeper" = 1 ]; then
  (IFS=,; echo "export CLICKHOUSE_KEEPER_URLS=${urls[*]}")
fi
