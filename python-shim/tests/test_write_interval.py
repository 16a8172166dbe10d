"""write_interval_seconds: a run's updates are kept in the bridge and written at most once per interval, and the
command does not end before its last state is stored (docs/how-it-works.md, "Write interval")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from meltano.core.state_store.base import MeltanoState

from chdb_server.testing import Endpoint
from meltano_state_backend_clickhouse.backend import ClickHouseStateBackendError, ClickhouseStateStoreManager

# None: the default, 1 s: a thousand updates. With 0 every update is an INSERT (what the bridge does, whatever Meltano's
# version): two hundred show that.
@pytest.mark.parametrize("interval, updates", [(None, 1000), pytest.param(0, 200, marks=pytest.mark.bridge_only)])
def test_a_thousand_updates_then_close_store_the_last_one_in_few_writes(clickhouse, schema, interval, updates):
    settings = {} if interval is None else {"write_interval_seconds": interval}
    started = time.monotonic()
    with ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, **settings) as run:
        for n in range(1, updates + 1):
            run.update(MeltanoState("wi:run", partial_state={"n": n}, completed_state={}))  # get + merge + set
    seconds = time.monotonic() - started
    # table="state" (the default) makes the settings differ: another bridge reads what the first one stored
    with ClickhouseStateStoreManager(uri=clickhouse.state_uri(), schema=schema, table="state") as reader:
        assert reader.get("wi:run").partial_state == {"n": updates}
        versions = len(reader.history("wi:run", limit=100_000))
    if interval == 0:
        assert versions == updates
    else:
        assert 1 <= versions <= seconds + 2, f"{versions} versions in {seconds:.1f} s"


# A command that never calls close(), as Meltano 3.7: under the lock, the first set is written at once and the next two
# wait in the bridge (the interval is 60 s); it waits for a line on stdin, then releases the lock and exits.
COMMAND = textwrap.dedent("""
    import sys
    from meltano.core.state_store.base import MeltanoState
    from meltano_state_backend_clickhouse.backend import ClickHouseStateBackendError, ClickhouseStateStoreManager
    uri, schema, budget = sys.argv[1:]
    m = ClickhouseStateStoreManager(uri=uri, schema=schema, retry_budget_seconds=int(budget), lock_timeout_seconds=60,
                                    write_interval_seconds=60)
    with m.acquire_lock("wi:exit", retry_seconds=1):
        for n in (1, 2, 3):
            m.set(MeltanoState("wi:exit", partial_state={}, completed_state={"n": n}))
        print("updated", flush=True)
        sys.stdin.readline()
""")


def _command(local_clickhouse, schema, budget: int) -> subprocess.Popen:
    uri = Endpoint(local_clickhouse.url_with_credentials).state_uri()
    command = subprocess.Popen([sys.executable, "-c", COMMAND, uri, schema, str(budget)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert command.stdout.readline() == "updated\n", command.stderr.read()
    return command


def _stored(local_clickhouse, schema) -> dict:
    uri = Endpoint(local_clickhouse.url_with_credentials).state_uri()
    with ClickhouseStateStoreManager(uri=uri, schema=schema) as reader:
        return reader.get("wi:exit").completed_state


@pytest.mark.bridge_only
@pytest.mark.python_runtime
def test_at_exit_the_last_state_is_written_before_the_command_ends(local_clickhouse, schema):
    local_clickhouse.start()
    command = _command(local_clickhouse, schema, budget=30)
    assert _stored(local_clickhouse, schema) == {"n": 1}  # 2 and 3 wait in the bridge
    _, stderr = command.communicate("exit\n", timeout=60)
    assert command.returncode == 0, stderr
    assert _stored(local_clickhouse, schema) == {"n": 3}


@pytest.mark.bridge_only
def test_a_server_back_within_the_retry_budget_gets_the_last_state_at_exit(local_clickhouse, schema):
    local_clickhouse.start()
    command = _command(local_clickhouse, schema, budget=30)
    local_clickhouse.stop()
    command.stdin.write("exit\n")
    command.stdin.flush()
    # The bridge says each try that failed while it goes on trying (docs/failures.md): wait for the first such line.
    for line in command.stderr:
        if "trying again" in line:
            break
    assert command.poll() is None, "the command ended before its last state was stored"
    local_clickhouse.start()
    _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    assert _stored(local_clickhouse, schema) == {"n": 3}


@pytest.mark.bridge_only
def test_a_server_gone_longer_than_the_retry_budget_fails_the_command_clearly_and_keeps_the_older_state(
        local_clickhouse, schema):
    local_clickhouse.start()
    command = _command(local_clickhouse, schema, budget=3)
    local_clickhouse.stop()
    _, stderr = command.communicate("exit\n", timeout=60)
    assert command.returncode == 1, stderr
    assert "'wi:exit'" in stderr and "the next run resumes from it" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    local_clickhouse.start()
    assert _stored(local_clickhouse, schema) == {"n": 1}


@pytest.mark.bridge_only
@pytest.mark.python_runtime
def test_a_bridge_killed_holding_states_it_kept_back_fails_close_naming_them(local_clickhouse, schema):
    """Issue 41: under the lock the first state of an id is written and the next kept back (the interval is 60 s);
    the bridge is SIGKILLed holding two such states. close() fails naming those two ids, not the one it wrote."""
    local_clickhouse.start()
    uri = Endpoint(local_clickhouse.url_with_credentials).state_uri()
    m = ClickhouseStateStoreManager(uri=uri, schema=schema, lock_timeout_seconds=60, write_interval_seconds=60)
    with m.acquire_lock("kb:c", retry_seconds=1):
        m.set(MeltanoState("kb:c", {}, {"n": 1}))  # written at once
    with m.acquire_lock("kb:a", retry_seconds=1), m.acquire_lock("kb:b", retry_seconds=1):
        for state_id in ("kb:a", "kb:b"):
            m.set(MeltanoState(state_id, {}, {"n": 1}))  # written at once
            m.set(MeltanoState(state_id, {}, {"n": 2}))  # kept back
        pid = m._bridge._client.process.pid
        os.kill(pid, signal.SIGKILL)
        m._bridge._client.process._popen.wait()
    with pytest.raises(ClickHouseStateBackendError) as failed:
        m.close()
    assert f"(pid {pid}) died holding the newest state of 'kb:a', 'kb:b', which" in str(failed.value), failed.value
    with ClickhouseStateStoreManager(uri=uri, schema=schema) as reader:
        assert [reader.get(i).completed_state for i in ("kb:a", "kb:b", "kb:c")] == [{"n": 1}] * 3
