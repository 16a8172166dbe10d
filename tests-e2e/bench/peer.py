"""The peer the benchmark compares large states with: clickhouse-connect making the calls the upstream Python add-on
makes (an insert of the JSON text, the server's now64(3) as version; `SELECT … FINAL WHERE state_id = … LIMIT 1`).

run.sh runs it in a virtualenv of its own that holds only clickhouse-connect, as a user's Meltano environment would:
beside chDB's numpy and pandas its insert is ~5× slower. Standard library and clickhouse-connect only.

    python peer.py URL fresh MB     one set + get in this new process: prints its milliseconds, from before the client
    python peer.py URL serve        per line "MB" on stdin, one set + get: prints its milliseconds
    python peer.py URL import FILE  `meltano state import` of FILE as the add-on makes it (Meltano's set_all: one set per
                                    state, one INSERT each): prints its seconds, from before the client
    python peer.py URL export       `meltano state export` as the add-on makes it (its get_all: the ids, then one get
                                    each): prints its seconds and the number of states
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


def import_states(url: str, path: str) -> None:
    states = json.loads(open(path).read())
    client = connect(url)
    for state_id, state in states.items():
        client.insert("state", [[state_id, json.dumps(state["partial"]), json.dumps(state["completed"])]],
                      column_names=["state_id", "partial_state", "completed_state"])


def export_states(url: str) -> int:
    client = connect(url)
    ids = [row[0] for row in client.query("SELECT DISTINCT state_id FROM state FINAL").result_rows]
    exported = {}
    for state_id in ids:
        rows = client.query("SELECT partial_state, completed_state FROM state FINAL WHERE state_id = {s:String} LIMIT 1",
                            parameters={"s": state_id}).result_rows
        exported[state_id] = {"partial": json.loads(rows[0][0] or "{}"), "completed": json.loads(rows[0][1] or "{}")}
    json.dumps(exported)
    return len(exported)


def main():
    url, mode = sys.argv[1], sys.argv[2]
    if mode in ("import", "export"):
        t0 = time.perf_counter()
        count = import_states(url, sys.argv[3]) if mode == "import" else export_states(url)
        print(f"{time.perf_counter() - t0:.2f} {count or ''}".strip(), flush=True)
        return
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
