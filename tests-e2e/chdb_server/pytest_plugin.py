"""Pytest fixtures: a ClickHouse to test against (CLICKHOUSE_URL, else a local chDB server) and private servers.

Used by tests-e2e/ and python-shim/tests/ alike: `pytest_plugins = ["chdb_server.pytest_plugin"]`.
"""
from __future__ import annotations

import os
from importlib.metadata import version

import pytest

from .testing import Endpoint, LocalClickHouse, LocalZooKeeper

MELTANO = tuple(int(part) for part in version("meltano").split(".")[:2])


def pytest_configure(config):
    config.addinivalue_line("markers", "bridge_only: exercises the bridge and the shim's process handling, which do "
                                       "not depend on Meltano's version")


def pytest_collection_modifyitems(config, items):
    """With BRIDGE_ONLY_TESTS=skip (the test command sets it for the older Meltanos), those run with the newest only."""
    if os.environ.get("BRIDGE_ONLY_TESTS") != "skip":
        return
    skip = pytest.mark.skip(reason="bridge only: does not depend on Meltano's version, runs with the newest Meltano")
    for item in items:
        if "bridge_only" in item.keywords:
            item.add_marker(skip)


def requires_meltano(major_minor: str, what: str):
    """Skips a test on a Meltano older than `major_minor`, saying which feature it lacks."""
    needed = tuple(int(part) for part in major_minor.split("."))
    return pytest.mark.skipif(MELTANO < needed, reason=f"Meltano {version('meltano')} has no {what} (since {major_minor})")


@pytest.fixture(scope="session")
def clickhouse(tmp_path_factory):
    """CLICKHOUSE_URL when set (a real server), else a chDB server for this test session."""
    url = os.environ.get("CLICKHOUSE_URL")
    if url:
        yield Endpoint(url)
        return
    server = LocalClickHouse(str(tmp_path_factory.mktemp("clickhouse")))
    server.start()
    yield Endpoint(server.url_with_credentials)
    server.stop()


@pytest.fixture(scope="session")
def keeper_clickhouses(tmp_path_factory):
    """Two ClickHouse servers with KeeperMap tables on one Keeper: CLICKHOUSE_KEEPER_URLS (comma-separated) when set,
    else two chDB servers with separate data and a ZooKeeper of this test session."""
    urls = os.environ.get("CLICKHOUSE_KEEPER_URLS")
    if urls:
        yield [Endpoint(url) for url in urls.split(",")]
        return
    zookeeper = LocalZooKeeper(str(tmp_path_factory.mktemp("zookeeper")))
    zookeeper.start()
    servers = [LocalClickHouse(str(tmp_path_factory.mktemp("keeper-clickhouse")), config=zookeeper.config)
               for _ in range(2)]
    try:
        for server in servers:
            server.start()
        yield [Endpoint(server.url_with_credentials) for server in servers]
    finally:
        for server in servers:
            server.stop()
        zookeeper.stop()


@pytest.fixture
def local_clickhouse(tmp_path):
    """A chDB server of this test's own, for what a shared server must not do: restart, faults, passwords."""
    server = LocalClickHouse(str(tmp_path / "db"), password="")
    yield server
    server.stop()
