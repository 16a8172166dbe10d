package io.github.chstate.bridge.config;

import java.time.Duration;

/**
 * Everything the bridge needs to reach ClickHouse and to run the lock, validated.
 *
 * @param database     the connection's default database (the URI path)
 * @param schema       the database that holds the state tables
 * @param lockTimeout  age after which a lock is stale and may be taken over
 * @param lockWait     how long acquire_lock keeps trying before it gives up
 * @param cluster      the cluster for {@code ON CLUSTER} DDL and Replicated engines, or null for a single node
 * @param lock         which lock guards each state id's updates
 * @param retryBudget  how long a statement that failed for a passing reason is tried again (0: never)
 * @param historyDays  how many days the history table keeps each state written (0: no history)
 * @param writeInterval how long a state set under the lock may wait in the bridge before it is written (0: never)
 * @param exclusiveRuns whether a pipeline run holds a lease on its state id for its whole life (docs/lock.md)
 */
public record Settings(
        String host,
        int port,
        String database,
        String user,
        String password,
        boolean secure,
        String caCert,
        String schema,
        String table,
        Duration connectTimeout,
        Duration queryTimeout,
        Duration lockTimeout,
        Duration lockRetry,
        Duration lockWait,
        String cluster,
        LockKind lock,
        Duration retryBudget,
        int historyDays,
        Duration writeInterval,
        boolean exclusiveRuns) {

    /** The {@code lock} setting. */
    public enum LockKind {
        /** KeeperMap where the server has it, else claims on a single node; refuses replicated tables without it. */
        AUTO,
        /** A KeeperMap table in strict mode: exclusive on a single node, a cluster and ClickHouse Cloud. */
        KEEPER,
        /** Claim rows in a MergeTree table: exclusive on a single node only. */
        CLAIMS
    }

    public Settings withLock(LockKind kind) {
        return new Settings(host, port, database, user, password, secure, caCert, schema, table, connectTimeout,
                queryTimeout, lockTimeout, lockRetry, lockWait, cluster, kind, retryBudget, historyDays, writeInterval,
                exclusiveRuns);
    }

    /** The JDBC URL, without credentials. */
    public String jdbcUrl() {
        return "jdbc:clickhouse:" + (secure ? "https" : "http") + "://" + hostForUrl() + ":" + port + "/" + database;
    }

    private String hostForUrl() {
        return host.contains(":") && !host.startsWith("[") ? "[" + host + "]" : host;
    }

    /** Safe to log: no password. */
    @Override
    public String toString() {
        return "Settings[" + (secure ? "https" : "http") + "://" + user + "@" + hostForUrl() + ":" + port + "/" + database
                + ", table=" + schema + "." + table + "]";
    }
}
