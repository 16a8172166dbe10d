"""The `state_backend.clickhouse.*` settings, registered with Meltano through the `meltano.settings` entry points.

Meltano's CLI imports this module while it reads the project, long before it needs state: the moment to start the
bridge (early.py).
"""
from meltano.core.setting_definition import SettingDefinition, SettingKind

from . import early


def _setting(key: str, label: str, description: str, **extra) -> SettingDefinition:
    # Every kind is a string to Meltano: its own conversion of a bad number or choice ends the command in a traceback
    # ("invalid literal for int()"), and it reads any boolean it does not know as false. The bridge checks each value
    # and names the setting, the value and what it expects.
    return SettingDefinition(name=f"state_backend.clickhouse.{key}", label=label, description=description,
                             kind=SettingKind.STRING, env_specific=True, **extra)


HOST = _setting("host", "ClickHouse host", "ClickHouse server host name (default localhost)")
PORT = _setting("port", "ClickHouse port", "HTTP(S) port (default 8123, or 8443 when secure)")
DATABASE = _setting("database", "ClickHouse database", "Database to connect to (required; the URI path)")
USER = _setting("user", "ClickHouse user", "User to connect as (required)")
PASSWORD = _setting("password", "ClickHouse password", "Password of the user (default empty)", sensitive=True)
SECURE = _setting("secure", "Use HTTPS", "Connect over TLS (default false)")
SCHEMA = _setting("schema", "State schema", "Database that holds the state tables (default meltano)")
TABLE = _setting("table", "State table", "Name of the state table (default state)")
CA_CERT = _setting("ca_cert", "CA certificate", "PEM file of the CA that signed the server's certificate (default: the JVM's trust store)")
CONNECT_TIMEOUT_SECONDS = _setting("connect_timeout_seconds", "Connect timeout", "Seconds to wait for a connection (default 10)")
QUERY_TIMEOUT_SECONDS = _setting("query_timeout_seconds", "Query timeout", "Seconds to wait for one query's answer (default 30)")
CLUSTER = _setting("cluster", "Cluster", "Cluster name for ON CLUSTER DDL and Replicated tables (default: none, a single node)")
LOCK = _setting("lock", "Lock", "How state ids are locked: auto (default: keeper where the server has KeeperMap, "
               "else claims on a single node), keeper (a KeeperMap table; single node, cluster, Cloud) or claims "
               "(MergeTree rows; single node only)")
LOCK_WAIT_SECONDS = _setting("lock_wait_seconds", "Lock wait", "Seconds to wait for a state id's lock before failing (default 30)")

RETRY_BUDGET_SECONDS = _setting("retry_budget_seconds", "Retry budget", "Seconds a statement that failed for a "
                                "passing reason (network, restart, busy server) is tried again (default 60; 0: never)")

HISTORY_DAYS = _setting("history_days", "History days", "Days the history table keeps every state written "
                        "(default 30; 0: no history)")

WRITE_INTERVAL_SECONDS = _setting("write_interval_seconds", "Write interval", "Seconds a state set under the lock "
                                  "may wait in the bridge before it is written; it is always written before the lock "
                                  "passes on and before the command ends (default 1; 0: every STATE message at once)")

EXCLUSIVE_RUNS = _setting("exclusive_runs", "Exclusive runs", "A pipeline run holds its state id for its whole "
                          "life, and another run of it anywhere is refused at once (default true; false: runs only "
                          "lock each state write)")

ALL = [HOST, PORT, DATABASE, USER, PASSWORD, SECURE, SCHEMA, TABLE, CA_CERT, CONNECT_TIMEOUT_SECONDS,
       QUERY_TIMEOUT_SECONDS, LOCK_WAIT_SECONDS, CLUSTER, LOCK, RETRY_BUDGET_SECONDS, HISTORY_DAYS,
       WRITE_INTERVAL_SECONDS, EXCLUSIVE_RUNS]

early.start_if_configured()
