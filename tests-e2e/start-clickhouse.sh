#!/usr/bin/env bash
# Starts the local chDB ClickHouse in the background and prints `export CLICKHOUSE_URL=…`.
#   usage: tests-e2e/start-clickhouse.sh DATA_DIR [PORT]     (PORT 0 or absent: a free port)
# The server's pid goes to DATA_DIR/server.pid and its log to DATA_DIR/server.log; stop it with
#   kill "$(cat DATA_DIR/server.pid)"
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${1:?usage: start-clickhouse.sh DATA_DIR [PORT]}"
port="${2:-0}"
python="${PYTHON:-python3}"
mkdir -p "$data"
url_file="$data/server.url"
rm -f "$url_file"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" nohup "$python" -m chdb_server --port "$port" --data "$data/db" \
  > "$url_file" 2> "$data/server.log" &
echo $! > "$data/server.pid"
for _ in $(seq 1 300); do
  if [ -s "$url_file" ]; then
    url="$(head -n 1 "$url_file")"
    echo "export CLICKHOUSE_URL=${url/:\/\//://default:@}"
    exit 0
  fi
  if ! kill -0 "$(cat "$data/server.pid")" 2>/dev/null; then
    echo "chdb_server failed to start:" >&2
    cat "$data/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "chdb_server did not start within 30 s" >&2
exit 1
