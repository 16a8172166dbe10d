"""Pytest fixtures: a ClickHouse to test against (CLICKHOUSE_URL, else a local chDB server) and private servers.

Installed with this package as the pytest plugin `chdb_server` (entry point pytest11): `clickhouse`,
`keeper_clickhouses` and `local_clickhouse` are there in every test of the virtualenv.
"""
from __future__ import annotations

import os

import pytest

from .testing import Endpoint, LocalClickHouse, LocalZooKeeper


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
