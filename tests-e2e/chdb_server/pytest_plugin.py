"""Pytest fixtures: a ClickHouse to test against (CLICKHOUSE_URL, else a local chDB server) and private servers.

Used by tests-e2e/ and python-shim/tests/ alike: `pytest_plugins = ["chdb_server.pytest_plugin"]`.
"""
from __future__ import annotations

import os

import pytest

from .testing import Endpoint, LocalClickHouse


@pytest.fixture(scope="session")
def clickhouse(tmp_path_factory):
    """CLICKHOUSE_URL when set (a real server), else a chDB server for this test session."""
    url = os.environ.get("CLICKHOUSE_URL")
    if url:
        yield Endpoint(url)
        return
    server = LocalClickHouse(str(tmp_path_factory.mktemp("clickhouse")))
    server.start()
    yield Endpoint(server.url.replace("://", "://default:@"))
    server.stop()


@pytest.fixture
def local_clickhouse(tmp_path):
    """A chDB server of this test's own, for what a shared server must not do: restart, faults, passwords."""
    server = LocalClickHouse(str(tmp_path / "db"), password="")
    yield server
    server.stop()
