import os
import sys

# The ClickHouse fixtures live with the local chDB server in tests-e2e/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests-e2e"))

pytest_plugins = ["chdb_server.pytest_plugin"]
