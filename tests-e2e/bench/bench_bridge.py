"""Benchmark of the bridge through the shim's process client (a benchmark, never a test).

    CLICKHOUSE_URL=http://default:@127.0.0.1:8123 python tests-e2e/bench/bench_bridge.py [--n 500]

Prints, as a markdown table: bridge start → initialize answered (cold: first JVM start; warm: later ones), and
p50/p99 of get, set, and update (acquire_lock + get + set + release_lock, what Meltano does per STATE message).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import urllib.parse
import uuid

from meltano_state_backend_clickhouse.client import JsonRpcClient
from meltano_state_backend_clickhouse.process import BridgeProcess


def settings_from_url(url: str, schema: str) -> dict:
    parts = urllib.parse.urlsplit(url)
    return {"host": parts.hostname, "port": parts.port, "user": urllib.parse.unquote(parts.username or "default"),
            "password": urllib.parse.unquote(parts.password or ""), "secure": parts.scheme == "https",
            "database": "default", "schema": schema}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def start(settings: dict) -> tuple[JsonRpcClient, float]:
    t0 = time.perf_counter()
    client = JsonRpcClient(BridgeProcess())
    client.call("initialize", {"settings": settings})
    return client, (time.perf_counter() - t0) * 1000


def timed(n: int, fn) -> list[float]:
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    args = parser.parse_args()
    settings = settings_from_url(os.environ["CLICKHOUSE_URL"], "bench_" + uuid.uuid4().hex[:8])

    starts = []
    for _ in range(5):
        client, ms = start(settings)
        starts.append(ms)
        client.process.stop()
    client, _ = start(settings)
    state = {"singer_state": {"bookmarks": {"stream": {"replication_key": "id", "replication_key_value": 0}}}}

    def set_(i):
        state["singer_state"]["bookmarks"]["stream"]["replication_key_value"] = i
        client.call("set", {"state_id": "bench:set", "partial": {}, "completed": state})

    def get(i):
        client.call("get", {"state_id": "bench:set"})

    def update(i):
        token = client.call("acquire_lock", {"state_id": "bench:update", "retry_seconds": 1})
        client.call("get", {"state_id": "bench:update"})
        client.call("set", {"state_id": "bench:update", "partial": state, "completed": {}})
        client.call("release_lock", {"token": token})

    timed(50, set_)  # warm-up: JIT, connections
    results = {"set": timed(args.n, set_), "get": timed(args.n, get), "update (lock+get+set+release)": timed(args.n, update)}
    client.process.stop()

    print(f"| measure | p50 ms | p99 ms |\n|---|---|---|")
    print(f"| bridge start → initialize, cold (first of 5) | {starts[0]:.0f} | |")
    print(f"| bridge start → initialize, warm (median of 4 more) | {statistics.median(starts[1:]):.0f} | |")
    for name, samples in results.items():
        print(f"| {name}, n={args.n} | {percentile(samples, 0.5):.2f} | {percentile(samples, 0.99):.2f} |")


if __name__ == "__main__":
    main()
