import os
import sys
import uuid

import pytest

# The ClickHouse fixtures live with the local chDB server in tests-e2e/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests-e2e"))

pytest_plugins = ["chdb_server.pytest_plugin"]


@pytest.fixture
def schema():
    """A database of its own for the test's tables."""
    return "shim_" + uuid.uuid4().hex[:10]
