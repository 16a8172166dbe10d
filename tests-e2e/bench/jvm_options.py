"""Peak RSS of one bridge per set of JVM options (a measurement, never a test): docs/how-it-works.md, "Memory".

    .venv/bin/python tests-e2e/bench/jvm_options.py CLICKHOUSE_STATE_URI < variants.jsonl

Each line of stdin is {"name": …, "java": path or null, "opts": "…"}; the options go after the shim's own
(CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS). For each, a fresh bridge (the second one: the first may write the class data
archive) answers `initialize` + `get`, then 300 locked set + get of a 2 KB state, then five set + get of a 1 MB state,
then five of a 10 MB state; printed: the peak RSS (VmHWM, MB) after each phase, and each phase's seconds.
"""
import json
import os
import sys
import time
import uuid

from meltano_state_backend_clickhouse import java as runtime
from meltano_state_backend_clickhouse import process
from meltano_state_backend_clickhouse.client import JsonRpcClient
from meltano_state_backend_clickhouse.process import BridgeProcess


def peak_mb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) // 1024
    return 0


def measure(uri: str, schema: str) -> dict:
    small = {"singer_state": {"bookmarks": {"s": {"v": "x" * 2000}}}}
    large = {"singer_state": {"bookmarks": {f"s{i}": {"v": "x" * 900, "i": i} for i in range(1000)}}}
    out = {}
    client = JsonRpcClient(BridgeProcess())
    t0 = time.perf_counter()
    client.call("initialize", {"settings": {"uri": uri, "schema": schema}})
    client.call("get", {"state_id": "m"})
    out["get"], out["get_s"] = peak_mb(client.process.pid), round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    for i in range(300):
        token = client.call("acquire_lock", {"state_id": "m", "retry_seconds": 0.1})
        client.call("set", {"state_id": "m", "partial": {}, "completed": dict(small, n=i)})
        client.call("release_lock", {"token": token})
        client.call("get", {"state_id": "m"})
    out["small300"], out["small300_s"] = peak_mb(client.process.pid), round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    for i in range(5):
        client.call("set", {"state_id": "b", "partial": {}, "completed": dict(large, n=i)})
        client.call("get", {"state_id": "b"})
    out["mb1x5"], out["mb1x5_s"] = peak_mb(client.process.pid), round(time.perf_counter() - t0, 2)
    huge = {"singer_state": {"bookmarks": {f"s{i}": {"v": "x" * 900, "i": i} for i in range(10_000)}}}
    t0 = time.perf_counter()
    for i in range(5):
        client.call("set", {"state_id": "h", "partial": {}, "completed": dict(huge, n=i)})
        client.call("get", {"state_id": "h"})
    out["mb10x5"], out["mb10x5_s"] = peak_mb(client.process.pid), round(time.perf_counter() - t0, 2)
    client.call("shutdown")
    client.process.stop()
    return out


def main():
    uri = sys.argv[1]
    schema = "jvm_" + uuid.uuid4().hex[:6]
    for line in sys.stdin:
        if not line.strip():
            continue
        variant = json.loads(line)
        saved = dict(os.environ)
        if variant.get("java"):
            os.environ[runtime.JAVA_ENV] = variant["java"]
        os.environ[process.JAVA_OPTS_ENV] = variant.get("opts", "")
        try:
            measure(uri, schema)  # writes the class data archive for a new Java or jar
            print(json.dumps({"name": variant["name"], **measure(uri, schema)}), flush=True)
        finally:
            os.environ.clear()
            os.environ.update(saved)


if __name__ == "__main__":
    main()
