"""Each failure path of the bridge provoked once, with a fault injected by the local server or ZooKeeper stopped: the
call ends within its bound, says what went wrong, and leaves no grant, pending state or session behind."""
from __future__ import annotations

import contextlib
import logging
import time

import pytest
from meltano.core.state_store.base import MeltanoState

from chdb_server.testing import Endpoint
from meltano_state_backend_clickhouse import client
from meltano_state_backend_clickhouse.backend import ClickHouseStateBackendError, ClickhouseStateStoreManager
from meltano_state_backend_clickhouse.client import BridgeError, SharedBridge

UNKNOWN_TABLE = 60  # a failure that does not pass: never tried again
NETWORK_ERROR = 210  # one that does
ACCESS_DENIED = 497


def _manager(local_clickhouse, schema, **settings) -> ClickhouseStateStoreManager:
    local_clickhouse.start()
    return ClickhouseStateStoreManager(uri=Endpoint(local_clickhouse.url_with_credentials).state_uri(), schema=schema,
                                       **settings)


@pytest.mark.bridge_only
def test_a_kept_lock_whose_check_fails_is_not_lost_to_its_own_bridge(local_clickhouse, schema):
    """A released lock is kept for a moment; taken again more than a second later, the bridge asks whether anyone
    waits. When that query fails, the lock must stay this bridge's to free or take: lost, it stays in the table under
    this bridge's token for lock_timeout_seconds (60 here), and the next acquire waits for it until lock_wait_seconds."""
    with _manager(local_clickhouse, schema, lock_timeout_seconds=60, lock_wait_seconds=1) as m:
        token = m._call("acquire_lock", {"state_id": "kept"})
        checked = time.monotonic()
        while time.monotonic() < checked + 1.1:  # past CHECK_QUEUE_AFTER: the next acquire asks the table
            time.sleep(0.05)
        m._call("release_lock", {"token": token})
        local_clickhouse.faults(fail_next=1, fail_code=UNKNOWN_TABLE)
        with pytest.raises(ClickHouseStateBackendError, match="Code: 60"):
            m._call("acquire_lock", {"state_id": "kept"})
        with m.acquire_lock("kept", retry_seconds=0.1):  # not "locked by another process"
            m.set(MeltanoState("kept", {}, {"n": 1}))
        assert m.get("kept").completed_state == {"n": 1}


@pytest.mark.bridge_only
def test_reads_of_many_ids_say_a_pending_write_that_failed_and_it_lands_later(local_clickhouse, schema):
    """Under the lock with a write interval, the second set is kept back. If writing it fails when get_all needs it
    written, get_all fails saying so instead of answering with the older state; the state stays pending and lands on
    the next try."""
    with _manager(local_clickhouse, schema, write_interval_seconds=60, retry_budget_seconds=1) as m:
        with m.acquire_lock("pending", retry_seconds=0.1):
            m.set(MeltanoState("pending", {}, {"n": 1}))  # written at once
            m.set(MeltanoState("pending", {}, {"n": 2}))  # kept back for the interval
            local_clickhouse.faults(fail_next=10_000, fail_code=NETWORK_ERROR)
            for read in (lambda: list(m.get_all("pend*")), lambda: list(m.get_state_ids()), m.clear_all):
                with pytest.raises(ClickHouseStateBackendError, match="newest state of 'pending' could not be written"):
                    read()
            local_clickhouse.faults(fail_next=0)
            assert [s.completed_state for s in m.get_all("pend*")] == [{"n": 2}]


@pytest.mark.bridge_only
def test_a_failed_initialize_keeps_the_working_session(local_clickhouse, schema):
    with _manager(local_clickhouse, schema) as m:
        m.set(MeltanoState("session", {}, {"n": 1}))
        bad = dict(m.settings, password="wrong")
        with pytest.raises(ClickHouseStateBackendError, match="rejected user"):
            m._call("initialize", {"settings": bad})
        assert m.get("session").completed_state == {"n": 1}
        m.set(MeltanoState("session", {}, {"n": 2}))
        assert m.get("session").completed_state == {"n": 2}


@pytest.mark.bridge_only
def test_a_lock_call_during_a_keeper_outage_ends_at_lock_wait_seconds(keeper_server, schema):
    """Without ZooKeeper a KeeperMap statement hangs in the server (~26 s of its own Keeper retries): each try ends by
    query_timeout_seconds, and no try starts after lock_wait_seconds, whatever retry_budget_seconds allows."""
    m = ClickhouseStateStoreManager(uri=keeper_server.uri(), schema=schema, lock="keeper", lock_wait_seconds=3,
                                    query_timeout_seconds=2, retry_budget_seconds=300)
    try:
        with m.acquire_lock("zk:before", retry_seconds=0.1):
            pass
        keeper_server.zookeeper.stop()
        with pytest.raises(ClickHouseStateBackendError, match=r"Tried (once|\d+ times) in \d+ s \(lock_wait_seconds\)"):
            with m.acquire_lock("zk:outage", retry_seconds=0.1):
                pytest.fail("a lock was granted without ZooKeeper")
    finally:
        m.close()


@pytest.mark.bridge_only
def test_an_insert_whose_answer_was_lost_is_stored_once(local_clickhouse, schema):
    """The server ran the INSERT but its answer was lost: the bridge sends it again, and the version check inside the
    INSERT refuses the second copy. The table has no deduplication window (the upstream add-on's has none either)."""
    with _manager(local_clickhouse, schema) as m:
        m.set(MeltanoState("once", {}, {"n": 1}))
        endpoint = Endpoint(local_clickhouse.url_with_credentials)
        before = local_clickhouse.stats()["statements"]
        local_clickhouse.faults(lose_answer_next=1)
        m.set(MeltanoState("once", {}, {"n": 2}))
        sent = local_clickhouse.stats()["last_statements"][-(local_clickhouse.stats()["statements"] - before):]
        assert [s.split()[0] for s in sent][:2] == ["INSERT", "INSERT"], sent  # the first one's answer was lost
        assert m.get("once").completed_state == {"n": 2}
        [table] = endpoint.select(f"SELECT create_table_query AS q FROM system.tables WHERE database = '{schema}' "
                                  "AND name = 'state'")
        assert "deduplication_window" not in table["q"], table["q"]
        rows = endpoint.select(f"SELECT completed_state FROM `{schema}`.state WHERE state_id = 'once' ORDER BY updated_at")
        assert [r["completed_state"] for r in rows] == ['{"n":1}', '{"n":2}']
        assert len(m.history("once")) == 2


@pytest.mark.bridge_only
def test_an_import_whose_answer_was_lost_is_stored_once(local_clickhouse, schema):
    """set_all's one INSERT of 1,000 states ran but its answer was lost: the re-sent copy is refused by the version check
    (above every version in the table), and the query after it finds all 1,000 rows there: one version each."""
    with _manager(local_clickhouse, schema) as m:
        m.set_all([MeltanoState(f"bulk:{i:04}", {}, {"n": 0}) for i in range(1000)])
        endpoint = Endpoint(local_clickhouse.url_with_credentials)
        before = local_clickhouse.stats()["statements"]
        local_clickhouse.faults(lose_answer_next=1, lose_answer_matching="^INSERT")
        assert m.set_all([MeltanoState(f"bulk:{i:04}", {}, {"n": i}) for i in range(1000)]) == 1000
        sent = local_clickhouse.stats()["last_statements"][-(local_clickhouse.stats()["statements"] - before):]
        assert [s.split()[0] for s in sent].count("INSERT") == 2, sent  # the first one's answer was lost
        [counts] = endpoint.select(f"SELECT count() AS rows, uniqExact(state_id) AS ids, countIf(completed_state = "
                                   f"'{{\"n\":7}}') AS of_7 FROM `{schema}`.state_history")
        assert counts == {"rows": 2000, "ids": 1000, "of_7": 1}
        assert m.get("bulk:0007").completed_state == {"n": 7}


@pytest.mark.bridge_only
def test_a_user_who_may_not_alter_the_table_still_works_and_is_told_what_an_admin_should_run(local_clickhouse, schema,
                                                                                              caplog):
    """A table an earlier bridge gave the deduplication window: the bridge takes it off when it opens the table. A
    runtime user without ALTER (code 497) must not be locked out by that: the bridge says what to run and goes on."""
    local_clickhouse.start()
    endpoint = Endpoint(local_clickhouse.url_with_credentials)
    endpoint.execute(f"CREATE DATABASE `{schema}`")
    endpoint.execute(f"CREATE TABLE `{schema}`.state (state_id String, partial_state Nullable(String), completed_state "
                     "Nullable(String), updated_at DateTime64(3) DEFAULT now64(3)) ENGINE = ReplacingMergeTree(updated_at) "
                     "ORDER BY state_id SETTINGS non_replicated_deduplication_window = 1000")
    local_clickhouse.faults(fail_matching="RESET SETTING", fail_code=ACCESS_DENIED)
    with caplog.at_level(logging.WARNING, logger="meltano_state_backend_clickhouse.bridge"):
        with ClickhouseStateStoreManager(uri=endpoint.state_uri(), schema=schema) as m:
            m.set(MeltanoState("restricted", {}, {"n": 1}))
            assert m.get("restricted").completed_state == {"n": 1}
    assert f"have an admin run: ALTER TABLE `{schema}`.`state` RESET SETTING non_replicated_deduplication_window" \
        in caplog.text, caplog.text
    local_clickhouse.faults(fail_matching="")
    # an admin's bridge takes the window off (other settings: a bridge of its own, which opens the table afresh)
    with ClickhouseStateStoreManager(uri=endpoint.state_uri(), schema=schema, table="state") as m:
        m.get("restricted")
    [table] = endpoint.select(f"SELECT create_table_query AS q FROM system.tables WHERE database = '{schema}' "
                              "AND name = 'state'")
    assert "deduplication_window" not in table["q"], table["q"]


@pytest.mark.bridge_only
def test_a_claim_whose_next_statement_fails_is_withdrawn(local_clickhouse, schema):
    """Issue 41: the claims lock's acquire inserts a claim, then asks who is first; when that query fails (for a reason
    that does not pass), the claim is withdrawn, not left live to hold every other process back for
    lock_timeout_seconds (60 here)."""
    with _manager(local_clickhouse, schema, lock="claims", lock_timeout_seconds=60, lock_wait_seconds=1) as m:
        m.set(MeltanoState("claimed", {}, {"n": 1}))  # the tables exist
        local_clickhouse.faults(fail_matching=r"ORDER BY min\(_block_number\) LIMIT 2", fail_code=ACCESS_DENIED)
        try:
            with pytest.raises(ClickHouseStateBackendError, match="Code: 497"):
                m._call("acquire_lock", {"state_id": "claimed"})
        finally:
            local_clickhouse.faults(fail_matching="")
        live = Endpoint(local_clickhouse.url_with_credentials).select(
            f"SELECT token FROM `{schema}`.state_claims WHERE state_id = 'claimed' GROUP BY token "
            f"HAVING countIf(kind = 'release') = 0")
        assert live == [], "a claim of the failed acquire is still live"
        with m.acquire_lock("claimed", retry_seconds=0.1):  # at once, not after lock_wait_seconds
            m.set(MeltanoState("claimed", {}, {"n": 2}))
        assert m.get("claimed").completed_state == {"n": 2}


@contextlib.contextmanager
def _two_runs(local_clickhouse, schema, lock_timeout_seconds: int):
    """The bridges of two pipeline runs on one state table (claims lock): the settings, the holder's, the other's. A
    run's bridge stays until its command ends; these end with the block, and the server's faults are cleared."""
    local_clickhouse.start()
    settings = ClickhouseStateStoreManager.bridge_settings(Endpoint(local_clickhouse.url_with_credentials).state_uri(),
                                                          lock_timeout_seconds=lock_timeout_seconds, schema=schema,
                                                          lock="claims")
    run = {"host": "runner", "command": "meltano run tap target", "force": False}
    holder = SharedBridge.acquire(settings, {**run, "id": "holder", "pid": 1})
    other = SharedBridge.acquire(settings, {**run, "id": "other", "pid": 2})
    try:
        yield settings, holder, other
    finally:
        local_clickhouse.faults(latency_ms=0, fail_matching="")
        for bridge in (holder, other):
            bridge.release()
            bridge.stop()


@pytest.mark.bridge_only
def test_a_run_lease_under_slow_statements_never_lapses_unnoticed(local_clickhouse, schema, caplog):
    """Issue 41: every statement takes 1.2 s and lock_timeout_seconds is 12 while a run holds its lease and its tap is
    quiet. For three lease lifetimes another run is refused each time it tries, unless the holder has said first that
    its lease lapsed; the holder's write afterwards lands."""
    with _two_runs(local_clickhouse, schema, lock_timeout_seconds=12) as (settings, holder, other):
        holder.call("get", {"state_id": "slow"})  # takes the lease
        local_clickhouse.faults(latency_ms=1200)
        refusals = 0
        with caplog.at_level(logging.WARNING, logger="meltano_state_backend_clickhouse.bridge"):
            until = time.monotonic() + 3 * 12
            while time.monotonic() < until:
                try:
                    other.call("get", {"state_id": "slow"})
                except BridgeError as refused:
                    assert refused.code == client.RUN_IN_PROGRESS, refused
                    refusals += 1
                    continue
                assert "lapsed" in caplog.text, "a second run was let in while the holder counted its lease its own"
                break
            else:
                assert "lapsed" not in caplog.text and "renew" not in caplog.text, caplog.text
        assert refusals > 0
        holder.call("set", {"state_id": "slow", "partial": {}, "completed": {"n": 1}})
    with ClickhouseStateStoreManager(uri=settings["uri"], schema=schema) as reader:
        assert reader.get("slow").completed_state == {"n": 1}


@pytest.mark.bridge_only
def test_a_kept_back_write_failing_longer_than_the_lease_stops_no_renewal(local_clickhouse, schema, caplog):
    """Issue 41: a run's kept-back write fails for a passing reason (TOO_MANY_PARTS) for three times
    lock_timeout_seconds; its retries never hold back the lease's renewals, so another run is refused each time it
    tries. Once the server takes inserts again, the kept-back state lands."""
    with _two_runs(local_clickhouse, schema, lock_timeout_seconds=4) as (settings, holder, other):
        def update(n: int):
            token = holder.call("acquire_lock", {"state_id": "parts"})
            holder.call("set", {"state_id": "parts", "partial": {}, "completed": {"n": n}})
            holder.call("release_lock", {"token": token})

        update(1)  # written at once
        local_clickhouse.faults(fail_matching=r"INSERT INTO `[^`]+`\.`state` \(", fail_code=252)
        update(2)  # kept back (write interval), then written after the release: refused, tried again
        refusals = 0
        with caplog.at_level(logging.WARNING, logger="meltano_state_backend_clickhouse.bridge"):
            until = time.monotonic() + 3 * 4
            while time.monotonic() < until:
                with pytest.raises(BridgeError) as refused:
                    other.call("get", {"state_id": "parts"})
                assert refused.value.code == client.RUN_IN_PROGRESS, refused.value
                refusals += 1
        assert refusals > 0
        assert "Could not write the newest state of 'parts'" in caplog.text  # the write did fail meanwhile
        assert "lapsed" not in caplog.text and "Could not renew" not in caplog.text, caplog.text
        local_clickhouse.faults(fail_matching="")
        holder.flush()
    with ClickhouseStateStoreManager(uri=settings["uri"], schema=schema) as reader:
        assert reader.get("parts").completed_state == {"n": 2}
