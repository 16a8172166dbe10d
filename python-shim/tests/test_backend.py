"""ClickhouseStateStoreManager with the real bridge against ClickHouse (CLICKHOUSE_URL or the local chDB server)."""
from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from meltano.core.state_store.base import MeltanoState, MissingStateBackendSettingsError, StateIDLockedError

from chdb_server.testing import Endpoint
from meltano_state_backend_clickhouse.backend import ClickHouseStateBackendError, ClickhouseStateStoreManager
from meltano_state_backend_clickhouse.client import BridgeDiedError, SharedBridge


@pytest.fixture
def manager(clickhouse, schema):
    m = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, host=None, port=None, table=None,
                                    lock_timeout_seconds=10, lock_retry_seconds=1)
    yield m
    m.close()


def bridge_pid(manager) -> int:
    return manager._bridge._client.process.pid


def freeze(pid: int):
    """SIGSTOP, then waits until every thread of the process has stopped: kill() returns before they have, and a thread
    that is running meanwhile may still answer a request sent just after."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 60
    while not all(state in "Tt" for state in _thread_states(pid)):
        assert time.monotonic() < deadline, f"pid {pid} did not stop within 60 s of SIGSTOP"
        time.sleep(0.01)


def _thread_states(pid: int) -> list[str]:
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
    return states


def test_settings_map_to_the_bridge_and_none_means_unset(manager, schema):
    assert manager.settings["schema"] == schema
    assert "host" not in manager.settings and "table" not in manager.settings
    assert manager.settings["lock_timeout_seconds"] == 10
    assert manager.label == "ClickHouse"


@pytest.mark.python_runtime
def test_every_method(manager):
    assert manager.get("nope") is None
    manager.set(MeltanoState("m:1", partial_state={}, completed_state={"singer_state": {"b": 1}}))
    got = manager.get("m:1")
    assert got.partial_state == {} and got.completed_state == {"singer_state": {"b": 1}}
    manager.set(MeltanoState("m:2", partial_state={"p": 1}, completed_state=None))
    assert manager.get("m:2").completed_state == {}
    assert sorted(manager.get_state_ids()) == ["m:1", "m:2"]
    assert sorted(s.state_id for s in manager.get_all("m:*")) == ["m:1", "m:2"]
    assert manager.set_all([MeltanoState("m:3", {}, {"c": 3}), MeltanoState("m:4", {"p": 4}, {})]) == 2
    manager.delete("m:4")
    assert manager.get("m:4") is None
    manager.clear("m:3")
    assert manager.get("m:3") is None
    assert manager.clear_all() == 2
    assert list(manager.get_state_ids("*")) == []


@pytest.mark.python_runtime
def test_partial_and_complete_matrix(manager):
    # new partial is set
    manager.update(MeltanoState("x", partial_state={"singer_state": {"a": 1}}, completed_state={}))
    assert manager.get("x").partial_state == {"singer_state": {"a": 1}}
    # partial merges onto partial
    manager.update(MeltanoState("x", partial_state={"singer_state": {"b": 2}}, completed_state={}))
    assert manager.get("x").partial_state == {"singer_state": {"a": 1, "b": 2}}
    # complete overwrites partial
    manager.update(MeltanoState("x", partial_state={}, completed_state={"singer_state": {"c": 3}}))
    assert (manager.get("x").partial_state, manager.get("x").completed_state) == ({}, {"singer_state": {"c": 3}})
    # complete overwrites complete
    manager.update(MeltanoState("x", partial_state={}, completed_state={"singer_state": {"d": 4}}))
    assert manager.get("x").completed_state == {"singer_state": {"d": 4}}
    # partial onto complete keeps both
    manager.update(MeltanoState("x", partial_state={"singer_state": {"e": 5}}, completed_state={}))
    got = manager.get("x")
    assert got.completed_state == {"singer_state": {"d": 4}} and got.partial_state == {"singer_state": {"e": 5}}


@pytest.mark.parametrize("pattern, expected", [
    ("dev:*", ["dev:a-to-b", "dev:c-to-b"]),
    ("dev:a-to-b", ["dev:a-to-b"]),
    ("dev:?-to-b", ["dev:a-to-b", "dev:c-to-b"]),
    ("a-to-b", []),
    ("*multiple-complete", ["multiple-complete", "x-multiple-complete"]),
    ("multiple-complete", ["multiple-complete"]),
    ("50%_off", ["50%_off"]),
    ("50?_off", ["50%_off"]),
    ("5*", ["50%_off", "50xyoff"]),
    ("it's*", ["it's \"quoted\""]),
    ("back\\slash", ["back\\slash"]),
    ("ünï*", ["ünïcødé ✓"]),
])
@pytest.mark.python_runtime
def test_patterns(manager, pattern, expected):
    ids = ["dev:a-to-b", "dev:c-to-b", "prod:a-to-b", "multiple-complete", "x-multiple-complete", "50%_off",
           "50xyoff", "it's \"quoted\"", "back\\slash", "ünïcødé ✓"]
    manager.set_all([MeltanoState(i, {}, {"id": i}) for i in ids])
    assert sorted(manager.get_state_ids(pattern)) == sorted(expected)
    assert sorted(s.state_id for s in manager.get_all(pattern)) == sorted(expected)
    for i in expected:
        assert manager.get(i).completed_state == {"id": i}


@pytest.mark.python_runtime
def test_managers_share_one_bridge(clickhouse, schema, manager):
    other = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema)
    try:
        assert bridge_pid(other) == bridge_pid(manager)
    finally:
        other.close()
    assert manager.get("still-works") is None


def test_missing_settings_raise_meltanos_error(clickhouse):
    with pytest.raises(MissingStateBackendSettingsError, match="database"):
        ClickhouseStateStoreManager(uri=f"clickhouse://default@{clickhouse.host}:{clickhouse.port}")


@pytest.mark.java_runtime
@pytest.mark.python_runtime
def test_a_killed_bridge_is_restarted_on_the_next_call(manager, caplog):
    manager.set(MeltanoState("k", {}, {"v": 1}))
    old = bridge_pid(manager)
    os.kill(old, signal.SIGKILL)
    _await_exit(manager)
    with caplog.at_level(logging.WARNING, logger="meltano_state_backend_clickhouse.bridge"):
        assert manager.get("k").completed_state == {"v": 1}
    assert bridge_pid(manager) != old
    assert "starting a new one" in caplog.text


def _await(condition, what: str, seconds: float = 120):
    """Polls condition until it holds; fails naming what it waited for after the deadline."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def _await_exit(manager):
    _await(lambda: manager._bridge._client.process.exit_code() is not None, "the bridge to exit")


def _claims(clickhouse, schema: str, state_id: str) -> list[str]:
    """The kinds of the claims lock's rows for a state id, in commit order, read on the server."""
    return [row["kind"] for row in clickhouse.select(f"SELECT kind FROM `{schema}`.state_claims WHERE state_id = "
                                                       f"'{state_id}' ORDER BY _block_number")]


def _await_claim_waiter(clickhouse, schema: str, state_id: str):
    """Polls until a second live claim (a waiting acquire's) is on the claims lock of state_id; fails after a minute."""
    claims = f"`{schema}`.state_claims WHERE state_id = '{state_id}'"
    sql = (f"SELECT uniqExact(token) AS live FROM {claims} AND kind = 'claim' "
           f"AND token NOT IN (SELECT token FROM {claims} AND kind = 'release')")
    _await(lambda: clickhouse.select(sql)[0]["live"] >= 2, f"an acquire waiting for the lock on {state_id!r}")


@pytest.mark.bridge_only
@pytest.mark.python_runtime
def test_calls_under_a_lock_whose_bridge_died_fail_and_reach_no_other_bridge(clickhouse, schema):
    """Issue 41: a call about a locked state id goes to the bridge that holds the lock, or fails; it is never sent to a
    new bridge, which does not hold the lock. Two deaths in a row: nothing is written or deleted by either new bridge."""
    m = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, lock="claims",
                                    lock_timeout_seconds=2, lock_retry_seconds=1)
    try:
        m.set(MeltanoState("dead:lock", {}, {"n": 0}))
        for attempt, call in enumerate([lambda: m.set(MeltanoState("dead:lock", {}, {"n": 1})),
                                        lambda: m.delete("dead:lock")]):
            with m.acquire_lock("dead:lock", retry_seconds=0.1):
                assert m.get("dead:lock").completed_state == {"n": 0}  # read under the lock, as Meltano's update does
                pid = bridge_pid(m)
                os.kill(pid, signal.SIGKILL)
                m._bridge._client.process._popen.wait()  # gone before the next call is sent
                with pytest.raises(ClickHouseStateBackendError, match="held the lock on state id 'dead:lock'"):
                    call()
                with pytest.raises(ClickHouseStateBackendError, match="was not sent to a new bridge"):
                    m.get("dead:lock")
        assert m.get("dead:lock").completed_state == {"n": 0}
        versions = clickhouse.select(f"SELECT count() AS n FROM `{schema}`.state_history WHERE state_id = 'dead:lock'")
        assert versions == [{"n": 1}], "a bridge that did not hold the lock wrote"
    finally:
        with contextlib.suppress(ClickHouseStateBackendError):  # the second dead bridge's states: none
            m.close()


@pytest.mark.python_runtime
@pytest.mark.bridge_only
def test_threads_share_a_manager(manager):
    errors = []

    def worker(n):
        try:
            for i in range(20):
                manager.set(MeltanoState(f"t:{n}", {}, {"i": i}))
                assert manager.get(f"t:{n}").completed_state == {"i": i}
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list(manager.get_state_ids("t:*"))) == 8


HOLDER = textwrap.dedent("""
    import sys
    from meltano_state_backend_clickhouse.backend import ClickhouseStateStoreManager
    m = ClickhouseStateStoreManager(uri=sys.argv[1], schema=sys.argv[2], lock="claims")
    with m.acquire_lock("contended", retry_seconds=0.1):
        print("locked", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
""")


def test_lock_contention_across_processes(clickhouse, schema):
    """A holder in another process keeps the lock until told: an acquire with lock_wait_seconds 1 gives up; one that
    waits gets the lock right after the holder released it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, clickhouse.state_uri(), schema],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, lock="claims",
                                         lock_wait_seconds=1) as impatient:
            with pytest.raises(StateIDLockedError, match="contended"):
                with impatient.acquire_lock("contended", retry_seconds=0.1):
                    pass
        with ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, lock="claims",
                                         lock_wait_seconds=60) as patient:
            seen_inside = []

            def take():
                with patient.acquire_lock("contended", retry_seconds=0.1):
                    seen_inside.append("inside")
                    seen_inside.append(holder.stdout.readline().strip())

            taking = threading.Thread(target=take)
            taking.start()
            _await_claim_waiter(clickhouse, schema, "contended")
            assert seen_inside == [], "the lock was granted while the holder held it"
            holder.stdin.write("release\n")
            holder.stdin.flush()
            taking.join(timeout=120)
            assert seen_inside == ["inside", "released"]
    finally:
        holder.kill()
        holder.wait(timeout=30)


ORPHAN = textwrap.dedent("""
    import sys, time
    from meltano_state_backend_clickhouse.backend import ClickhouseStateStoreManager
    m = ClickhouseStateStoreManager(uri=sys.argv[1], schema=sys.argv[2])
    print(m._bridge._client.process.pid, flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or gone between open and read
        return False


def _await_gone(pid: int, what: str = "the bridge to exit"):
    """Polls until the process has exited (a bridge told to exit is not waited for); fails naming it after 2 minutes."""
    _await(lambda: not _alive(pid), what)


@pytest.mark.python_runtime
def test_no_bridge_outlives_a_sigkilled_parent(clickhouse, schema):
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN, clickhouse.state_uri(), schema], stdout=subprocess.PIPE,
                              text=True)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    _await_gone(pid, "the bridge to exit after its parent was SIGKILLed")


@pytest.mark.java_runtime
@pytest.mark.python_runtime
def test_the_password_stays_out_of_argv_env_and_logs(local_clickhouse, schema, caplog, monkeypatch):
    secret = "pw-" + uuid.uuid4().hex
    local_clickhouse.password = secret
    local_clickhouse.start()
    host_port = local_clickhouse.url.split("://", 1)[1]
    uri = f"clickhouse://default:{secret}@{host_port}/default"
    monkeypatch.setenv("MELTANO_STATE_BACKEND_URI", uri)
    monkeypatch.setenv("MELTANO_STATE_BACKEND_CLICKHOUSE_PASSWORD", secret)
    logging.getLogger("meltano_state_backend_clickhouse").setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG):
            m = ClickhouseStateStoreManager(uri=uri, schema=schema)
            pid = bridge_pid(m)
            m.set(MeltanoState("secret-test", {}, {"ok": True}))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert secret.encode() not in f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert secret.encode() not in f.read()
            with pytest.raises(ClickHouseStateBackendError) as error:
                ClickhouseStateStoreManager(uri=uri.replace(secret, secret + "-wrong"), schema=schema)
            assert secret not in str(error.value) and "rejected user 'default'" in str(error.value)
            m.close()
        assert caplog.records, "debug logging of the bridge reached Python logging"
        assert secret not in caplog.text
    finally:
        logging.getLogger("meltano_state_backend_clickhouse").setLevel(logging.NOTSET)


@pytest.mark.python_runtime
def test_a_manager_opened_soon_after_the_last_one_closed_gets_the_same_bridge(clickhouse, schema):
    first = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema)
    first.set(MeltanoState("linger", {}, {"n": 1}))
    pid = bridge_pid(first)
    first.close()
    second = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema)
    try:
        assert bridge_pid(second) == pid
        assert second.get("linger").completed_state == {"n": 1}
    finally:
        second.close()
    SharedBridge.leave_all()
    _await_gone(pid)


@pytest.mark.python_runtime
def test_close_of_the_last_manager_stops_the_bridge_after_the_linger(clickhouse, schema, monkeypatch):
    monkeypatch.setattr(SharedBridge, "LINGER_SECONDS", 0.2)
    m = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema)
    pid = bridge_pid(m)
    m.close()
    _await_gone(pid)
    with pytest.raises(ClickHouseStateBackendError, match="closed"):
        m.get("x")


@pytest.mark.python_runtime
def test_leave_all_at_exit_leaves_no_bridge(clickhouse, schema):
    m = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema)
    pid = bridge_pid(m)
    SharedBridge.leave_all()
    _await_gone(pid)


def _state_of(megabytes: int) -> dict:
    """Streams whose bookmarks hold what JSON must escape or carry: unicode, quotes, backslashes, control characters,
    nested arrays, big and float numbers."""
    stream = {"replication_key_value": "2026-12-04T00:00:00+00:00", "pad": "x" * 700,
              "text": "ünï✓ 𝄞 it's \"quoted\" back\\slash tab\t nl\n cr\r nul\x00 unit\x1f del\x7f",
              "nested": [[1, 2.5, None, True, False], {"deep": [{"x": [-1, 10**18, 1e-7]}], "": []}]}
    count = megabytes * 1024 * 1024 // len(json.dumps(stream))
    return {"singer_state": {"bookmarks": {f"stream_{i}": dict(stream, i=i) for i in range(count)}}}


@pytest.mark.java_runtime
@pytest.mark.bridge_only
def test_jvm_options_that_print_keep_the_protocol_channel_clean(clickhouse, schema, monkeypatch):
    """-verbose:class and -XX:+PrintFlagsFinal print to stdout by default, where only JSON-RPC may go."""
    monkeypatch.setenv("CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS", "-verbose:class -XX:+PrintFlagsFinal -Xlog:gc=info:stdout")
    with ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema) as m:
        m.set(MeltanoState("chatty", {}, {"n": 1}))
        assert m.get("chatty").completed_state == {"n": 1}


@pytest.mark.java_runtime  # the heap: its default size and what running out of it does
@pytest.mark.bridge_only
@pytest.mark.parametrize("megabytes", [1, 10, 50])
@pytest.mark.python_runtime
def test_large_states_round_trip_exactly(manager, megabytes):
    big, small = _state_of(megabytes), {"partial": "it's\n\"here\" ü"}
    manager.set(MeltanoState("big", small, big))
    got = manager.get("big")
    assert got.completed_state == big and got.partial_state == small
    assert [s.completed_state == big for s in manager.get_all("big")] == [True]


@pytest.mark.java_runtime  # the heap: its default size and what running out of it does
@pytest.mark.bridge_only
def test_a_100_mb_state_works_with_the_default_memory(manager):
    big = _state_of(100)
    manager.set(MeltanoState("huge", {}, big))
    assert manager.get("huge").completed_state == big


@pytest.mark.java_runtime  # the heap: its default size and what running out of it does
@pytest.mark.bridge_only
def test_a_state_too_large_for_the_bridges_memory_fails_clearly_and_keeps_what_is_stored(clickhouse, schema, monkeypatch):
    with ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema) as roomy:
        roomy.set(MeltanoState("stored-big", {}, _state_of(40)))
    monkeypatch.setenv("CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS", "-Xmx64m")  # takes requests of up to 16 MB
    small = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, table="state", lock_timeout_seconds=10)
    try:
        small.set(MeltanoState("kept", {}, {"n": 1}))
        pid = bridge_pid(small)
        with pytest.raises(ClickHouseStateBackendError, match="larger than this bridge takes.*Nothing was stored.*"
                                                            "CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS=-Xmx"):
            small.set(MeltanoState("kept", {}, _state_of(20)))
        with pytest.raises(ClickHouseStateBackendError, match="ran out of memory.*CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS=-Xmx"):
            small.get("stored-big")
        assert small.get("kept").completed_state == {"n": 1}
        assert bridge_pid(small) == pid  # the same bridge answered throughout
    finally:
        small.close()


@pytest.mark.bridge_only
def test_zookeeper_down_during_updates_gives_clear_errors_and_keeps_the_state(keeper_server, schema):
    """lock: keeper on a server of its own whose ZooKeeper stops for a few seconds in the middle of a run of updates."""
    zookeeper = keeper_server.zookeeper
    m = ClickhouseStateStoreManager(uri=keeper_server.uri(), schema=schema, lock="keeper", lock_wait_seconds=5,
                                    lock_timeout_seconds=2, lock_retry_seconds=1)
    done, errors = 0, []

    def update() -> bool:
        nonlocal done
        try:
            with m.acquire_lock("zk:run", retry_seconds=0.1):
                current = m.get("zk:run")
                n = current.completed_state["n"] if current else 0
                m.set(MeltanoState("zk:run", partial_state={}, completed_state={"n": n + 1}))
            done += 1
            return True
        except (ClickHouseStateBackendError, StateIDLockedError) as error:
            errors.append(str(error))
            return False

    try:
        assert all(update() for _ in range(10))
        zookeeper.stop()
        # One update only: without ZooKeeper each statement takes ~26 s, ClickHouse's own Keeper retries.
        assert not update(), "an update worked without ZooKeeper"
        zookeeper.start()  # same port and data
        deadline = time.monotonic() + 120
        while not update():
            assert time.monotonic() < deadline, f"no update worked after ZooKeeper came back: {errors[-3:]}"
            time.sleep(0.5)
        assert all(update() for _ in range(5))
        # Each failure names the outage (Keeper), or is the lock's wait running out behind a lock taken before it;
        # at least one names the outage.
        kinds = ["Keeper" if "Keeper" in message else "wait" if "is locked by another process" in message else message
                 for message in errors]
        assert set(kinds) <= {"Keeper", "wait"} and "Keeper" in kinds, errors
        assert not any("Traceback" in message for message in errors)
        # Every update that answered OK is stored; one whose release failed after its set is stored too.
        assert done <= m.get("zk:run").completed_state["n"] <= done + 1, (done, errors)
    finally:
        m.close()


def _every_method(m: ClickhouseStateStoreManager, n: int) -> None:
    """Each method once, on ids of round n; checks what each answers."""
    m.set(MeltanoState(f"f:{n}", {}, {"n": n}))
    assert m.get(f"f:{n}").completed_state == {"n": n}
    assert f"f:{n}" in m.get_state_ids("f:*")
    assert [s.completed_state for s in m.get_all(f"f:{n}")] == [{"n": n}]
    assert m.set_all([MeltanoState(f"g:{n}", {"p": n}, {})]) == 1
    with m.acquire_lock(f"f:{n}", retry_seconds=0.1):
        m.set(MeltanoState(f"f:{n}", {}, {"n": n, "locked": True}))
    m.delete(f"g:{n}")
    assert m.get(f"g:{n}") is None


@pytest.mark.bridge_only
@pytest.mark.parametrize("fault", [{"fail_next": 3, "fail_code": 210}, {"fail_next": 3, "fail_code": 242},
                                   {"fail_next": 2, "fail_code": 999}, {"drop_next": 3}])
def test_passing_failures_under_every_method_are_absorbed_and_past_the_budget_fail_clearly(local_clickhouse, schema,
                                                                                          fault, caplog):
    local_clickhouse.start()
    uri = Endpoint(local_clickhouse.url_with_credentials).state_uri()
    with ClickhouseStateStoreManager(uri=uri, schema=schema, retry_budget_seconds=5, lock_timeout_seconds=5) as m:
        _every_method(m, 0)
        with caplog.at_level(logging.WARNING, logger="meltano_state_backend_clickhouse.bridge"):
            for n, method in enumerate(["set", "get", "get_state_ids", "get_all", "set_all", "acquire_lock",
                                        "release_lock", "delete"], start=1):
                # The faults hit the first statements of this round's calls, whichever they are.
                local_clickhouse.faults(**fault)
                _every_method(m, n)
        assert caplog.text.count("trying again") >= 8 * max(fault.get("fail_next", 0), fault.get("drop_next", 0))
        local_clickhouse.faults(fail_next=10_000, fail_code=fault.get("fail_code", 210))
        with pytest.raises(ClickHouseStateBackendError, match=r"Tried \d+ times in \d+ s \(retry_budget_seconds\)"):
            m.set(MeltanoState("f:1", {}, {"lost": True}))
        local_clickhouse.faults(fail_next=0, drop_next=0)
        assert m.get("f:1").completed_state == {"n": 1, "locked": True}  # nothing lost or mixed


@pytest.mark.bridge_only
def test_a_failure_that_does_not_pass_is_not_retried(local_clickhouse, schema):
    local_clickhouse.start()
    uri = Endpoint(local_clickhouse.url_with_credentials).state_uri()
    with ClickhouseStateStoreManager(uri=uri, schema=schema, retry_budget_seconds=60) as m:
        m.set(MeltanoState("n", {}, {"n": 1}))
        local_clickhouse.faults(fail_next=1, fail_code=159 + 1)  # 160: TOO_SLOW, a query's own problem
        with pytest.raises(ClickHouseStateBackendError, match="Code: 160") as error:
            m.get("n")
        assert "Tried" not in str(error.value)  # one try: a retried one says how many
        assert m.get("n").completed_state == {"n": 1}


@pytest.mark.bridge_only
@pytest.mark.python_runtime
def test_a_bridge_killed_during_eight_threads_of_updates(clickhouse, schema, caplog):
    """Meltano's update (lock, get, merge, set) from 8 threads, each counting on its own id; the bridge is SIGKILLed
    midway. Every update either succeeded or raised our clear error, and each counter holds exactly its successes.
    With write_interval_seconds: 0, so that every success is stored: a killed bridge loses what it kept back (at most
    one interval; test_write_interval.py and the end-to-end tests cover that)."""
    m = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, lock_timeout_seconds=2,
                                    lock_wait_seconds=30, write_interval_seconds=0)
    successes, in_flight_sets, failures, unexpected = [0] * 8, [0] * 8, [], []
    stop = threading.Event()

    def worker(n):
        while not stop.is_set():
            step = "lock"
            try:
                with m.acquire_lock(f"kill:{n}", retry_seconds=0.1):
                    current = m.get(f"kill:{n}")
                    count = current.completed_state["count"] if current else 0
                    step = "set"
                    m.set(MeltanoState(f"kill:{n}", {}, {"count": count + 1}))
                    step = "release"
                successes[n] += 1
            except (ClickHouseStateBackendError, StateIDLockedError) as error:
                failures.append(str(error))
                in_flight_sets[n] += step == "set"  # the bridge died during it: it may have written or not
            except Exception as error:  # noqa: BLE001 - anything else fails the test
                unexpected.append(repr(error))

    with caplog.at_level(logging.WARNING, logger="meltano_state_backend_clickhouse.bridge"):
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        _await(lambda: min(successes) >= 3, "every worker to count to 3")
        at_kill = list(successes)
        os.kill(bridge_pid(m), signal.SIGKILL)
        _await(lambda: all(now >= then + 3 for now, then in zip(successes, at_kill)),
               "every worker to count 3 more after the kill")
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert unexpected == []
    # acquire_lock is sent again (the new bridge waits for the dead one's lock); a call under a lock is not
    assert all("The ClickHouse state bridge" in f and "was not sent to a new bridge" in f for f in failures), failures
    assert "exited" in caplog.text  # a call found the bridge dead, during it or before it: a new bridge took over
    for n in range(8):
        assert successes[n] > 0
        stored = m.get(f"kill:{n}").completed_state["count"]
        assert successes[n] <= stored <= successes[n] + in_flight_sets[n], (n, successes[n], in_flight_sets[n], stored)
    m.close()


_IDS = ["a[x]b", "axb", "ayb", "a_b", "a%b", "a.b", "a\\b", "a-b", "a]b", "a!b", "a^b", "a*b", "a?b", "ab", "a\nb",
        "dev:tap-x", "dev:tap-y", "prod:tap-x", "A", "ü-1", "u-1", "[", "x[", "!x", "b", "a(b)", "a{1}", "a$", "a|b"]
_PATTERNS = ["*", "a*", "a?b", "a[x]b", "a[!x]b", "a[xy]b", "a[x-z]b", "a[z-x]b", "a[!z-x]b", "a[]]b", "a[!]]b",
             "a[-]b", "a[a-]b", "a[%]b", "a_b", "a%b", "a.b", "a\\b", "a[\\]b", "a[^]b", "a[!^]b", "dev:*",
             "*:tap-?", "*tap-[xy]", "?-1", "[", "x[", "[!a-z]", "[[]", "a[*]b", "a[?]b", "*[", "a(b)", "a{1}", "a$",
             "a|b", "a[.]b", "a\nb", "a?b*", "**", "?", ""]


@pytest.mark.python_runtime
def test_patterns_match_as_fnmatch_does(manager):
    """Meltano's S3, GCS, Azure and local backends filter state ids with fnmatch: ours matches the same ids."""
    prefix = "glob:" + uuid.uuid4().hex[:6] + ":"
    manager.set_all([MeltanoState(prefix + i, {}, {"n": 1}) for i in _IDS])
    differ = {}
    for pattern in _PATTERNS:
        ours = sorted(s[len(prefix):] for s in manager.get_state_ids(prefix + pattern))
        theirs = sorted(i for i in _IDS if fnmatch.fnmatchcase(prefix + i, prefix + pattern))
        if ours != theirs:
            differ[pattern] = (ours, theirs)
    assert not differ
    assert sorted(s.state_id[len(prefix):] for s in manager.get_all(prefix + "a[!x]b")) == \
        sorted(i for i in _IDS if fnmatch.fnmatchcase(i, "a[!x]b"))


def _nested(depth: int) -> dict:
    state: dict = {"leaf": 1}
    for _ in range(depth - 1):
        state = {"a": state}
    return state


def _depth(state: dict) -> tuple[int, object]:
    """How deep a state of _nested is, and its leaf, without recursion (== on it would recurse past the limit)."""
    depth = 1
    while "a" in state:
        state, depth = state["a"], depth + 1
    return depth, state["leaf"]


@pytest.mark.python_runtime
def test_a_state_as_deep_as_meltano_writes_round_trips_and_a_deeper_one_is_refused_clearly(manager):
    deep = _nested(990)  # Meltano's own json writes this; the upstream add-on stores it
    manager.set(MeltanoState("deep", {}, deep))
    assert _depth(manager.get("deep").completed_state) == (990, 1)
    with pytest.raises(ClickHouseStateBackendError, match="nests deeper than 3000 levels"):
        manager.set(MeltanoState("deep", {}, _nested(3500)))
    assert _depth(manager.get("deep").completed_state) == (990, 1)  # nothing half-stored


@pytest.mark.bridge_only
@pytest.mark.python_runtime
def test_a_hung_bridge_is_given_up_within_the_deadline_its_settings_give(clickhouse, schema):
    """A SIGSTOPped JVM answers nothing: the call fails naming it, and the bridge is stopped, not left behind."""
    m = ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, lock_wait_seconds=1,
                                    lock_timeout_seconds=2, retry_budget_seconds=0, connect_timeout_seconds=1,
                                    query_timeout_seconds=1)
    try:
        m.set(MeltanoState("hung", {}, {"n": 1}))
        client = m._bridge._client
        assert client.answer_within == 1 + 2 + 0 + 2 * (1 + 1) + 10
        client.answer_within = 2  # the same path, without the test waiting 17 s
        pid = client.process.pid
        freeze(pid)
        with pytest.raises(BridgeDiedError, match="did not answer 'ping' within 2 s"):
            client.call("ping")
        assert client.process._popen.poll() is not None  # stopped (killed), not left stopped
        assert m.get("hung").completed_state == {"n": 1}  # on a new bridge
        m._bridge._client.answer_within, pid = 2, bridge_pid(m)
        freeze(pid)  # under a manager's call: a get is sent again to a new bridge
        assert m.get("hung").completed_state == {"n": 1}
        assert bridge_pid(m) != pid
    finally:
        m.close()

