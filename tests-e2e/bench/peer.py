"""The peer the benchmark compares large states with: clickhouse-connect making the calls the upstream Python add-on
makes (an insert of the JSON text, the server's now64(3) as version; `SELECT … FINAL WHERE state_id = … LIMIT 1`).

run.sh runs it in a virtualenv of its own that holds only clickhouse-connect, as a user's Meltano environment would:
beside chDB's numpy and pandas its insert is ~5× slower. Standard library and clickhouse-connect only.

    python peer.py URL fresh MB     one set + get in this new process: prints its milliseconds, from before the client
    python peer.py URL serve        per line "MB" on stdin, one set + get: prints its milliseconds
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from urllib.parse import unquote, urlsplit


def large_state(megabytes: int) -> dict:
    """A Singer state of about `megabytes` MB: 1,000 streams per MB. The benchmark builds its own with this too."""
    stream = {"replication_key": "updated_at", "replication_key_value": "2026-12-04T00:00:00+00:00", "pad": "x" * 900}
    return {"singer_state": {"bookmarks": {f"stream_{i}": dict(stream, i=i) for i in range(megabytes * 1000)}}}


def set_and_get(client, state: dict, table: str = "state") -> None:
    # Each write a different state, so that a write is never the same block as an earlier one (the add-on's rows carry
    # no deduplication token; on a table that deduplicates, such an insert would be dropped).
    state = {**state, "write": uuid.uuid4().hex}
    client.insert(table, [["bench:peer", None, json.dumps(state)]],
                  column_names=["state_id", "partial_state", "completed_state"])
    rows = client.query(f"SELECT partial_state, completed_state FROM {table} FINAL WHERE state_id = {{s:String}} "
                        "LIMIT 1", parameters={"s": "bench:peer"}).result_rows
    if json.loads(rows[0][1]) != state:
        raise SystemExit("the peer read back another state")


def connect(url: str):
    import clickhouse_connect

    parts = urlsplit(url)
    return clickhouse_connect.get_client(host=parts.hostname, port=parts.port, username=unquote(parts.username or "default"),
                                         password=unquote(parts.password or ""), database=parts.path.strip("/"))


def main():
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "fresh":
        state = large_state(int(sys.argv[3]))
        t0 = time.perf_counter()
        set_and_get(connect(url), state)
        print(f"{(time.perf_counter() - t0) * 1000:.1f}", flush=True)
        return
    client = connect(url)
    for line in sys.stdin:
        state = large_state(int(line))
        t0 = time.perf_counter()
        set_and_get(client, state)
        print(f"{(time.perf_counter() - t0) * 1000:.1f}", flush=True)


if __name__ == "__main__":
    main()
