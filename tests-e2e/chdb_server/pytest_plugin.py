"""Pytest fixtures: a ClickHouse to test against (CLICKHOUSE_URL, else a local chDB server) and private servers.

Used by tests-e2e/ and python-shim/tests/ alike: `pytest_plugins = ["chdb_server.pytest_plugin"]`.
"""
from __future__ import annotations

import os
import urllib.parse

import pytest

from .testing import LocalClickHouse


class Endpoint:
    """Where a ClickHouse answers, with its credentials."""

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (8443 if self.secure else 8123)
        self.user = urllib.parse.unquote(parts.username or "default")
        self.password = urllib.parse.unquote(parts.password or "")
        self.http_url = f"{parts.scheme}://{self.host}:{self.port}"

    def state_uri(self, database: str = "default") -> str:
        user = urllib.parse.quote(self.user, safe="")
        password = urllib.parse.quote(self.password, safe="")
        return f"clickhouse://{user}:{password}@{self.host}:{self.port}/{database}"


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
