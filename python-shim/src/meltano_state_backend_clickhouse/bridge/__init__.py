"""Holds the bridge jar (meltano-clickhouse-bridge.jar), put here when the package is built."""
