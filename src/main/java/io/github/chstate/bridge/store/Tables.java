package io.github.chstate.bridge.store;

import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;
import io.github.chstate.bridge.config.Settings;

import java.util.List;
import java.util.Set;

/**
 * The two tables and their DDL. The state table is the upstream add-on's, unchanged, so either can read what the
 * other wrote; the claims table is ours (the upstream {@code <table>_lock} has another layout and is left alone).
 */
public final class Tables {
    static final Set<String> STATE_COLUMNS = Set.of("state_id", "partial_state", "completed_state", "updated_at");

    final String schema;
    final String state;
    final String claims;
    private final String stateName;
    private final String claimsName;
    private final String onCluster;

    public Tables(Settings settings) {
        this.schema = settings.schema();
        this.stateName = settings.table();
        this.claimsName = settings.table() + "_claims";
        this.state = Sql.identifier(schema) + "." + Sql.identifier(stateName);
        this.claims = Sql.identifier(schema) + "." + Sql.identifier(claimsName);
        this.onCluster = settings.cluster() == null ? "" : " ON CLUSTER " + Sql.identifier(settings.cluster());
    }

    /**
     * The DDL, idempotent. With a cluster: {@code ON CLUSTER} and Replicated engines, which deduplicate re-sent
     * inserts by themselves (the lock's guarantee does not hold there; see {@link ClaimLock}).
     */
    List<String> createStatements() {
        boolean replicated = !onCluster.isEmpty();
        String path = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'";
        return List.of(
                "CREATE DATABASE IF NOT EXISTS " + Sql.identifier(schema) + onCluster,
                "CREATE TABLE IF NOT EXISTS " + state + onCluster + " ("
                        + "state_id String, partial_state Nullable(String), completed_state Nullable(String), "
                        + "updated_at DateTime64(3) DEFAULT now64(3)) ENGINE = "
                        + (replicated ? "ReplicatedReplacingMergeTree(" + path + ", updated_at)" : "ReplacingMergeTree(updated_at)")
                        + " ORDER BY state_id" + (replicated ? "" : " SETTINGS non_replicated_deduplication_window = 1000"),
                // One part per claim; the persisted block number gives the commit order (ClaimLock).
                "CREATE TABLE IF NOT EXISTS " + claims + onCluster + " ("
                        + "state_id String, token String, kind Enum8('claim' = 1, 'release' = 2), at DateTime64(3) DEFAULT now64(3)) "
                        + "ENGINE = " + (replicated ? "ReplicatedMergeTree(" + path + ")" : "MergeTree")
                        + " ORDER BY (state_id, at) TTL toDateTime(at) + INTERVAL 1 DAY SETTINGS enable_block_number_column = 1");
    }

    /** What {@link #ensure} found: the server's version and clock, and the lock table's engine. */
    public record Found(String serverVersion, ServerClock clock, String claimsEngine) {
    }

    /**
     * Creates the schema database and both tables where missing, and checks an existing state table. When both
     * exist, as on every start but the first, this is a single query.
     */
    public Found ensure(ClickHouse ch) {
        Probe probe = probe(ch);
        if (probe.stateEngine.isEmpty() || probe.claimsEngine.isEmpty()) {
            createStatements().forEach(ch::execute);
            probe = probe(ch);
        }
        if (!List.of(probe.stateColumns.split(",")).containsAll(STATE_COLUMNS)) {
            throw new BridgeException(ErrorCode.CONFIGURATION, "Table " + schema + "." + stateName + " exists but is not a "
                    + "state table (it needs columns " + String.join(", ", STATE_COLUMNS.stream().sorted().toList())
                    + "). Set state_backend.clickhouse.table to another name.");
        }
        // A table the upstream add-on created has no deduplication window, so an insert the driver re-sends would add
        // a second version. With the window, a re-sent insert (same deduplication token) is a no-op. Set in place.
        if ("ReplacingMergeTree".equals(probe.stateEngine) && !probe.stateCreate.contains("non_replicated_deduplication_window")) {
            ch.execute("ALTER TABLE " + state + onCluster + " MODIFY SETTING non_replicated_deduplication_window = 1000");
        }
        return new Found(probe.serverVersion, probe.clock, probe.claimsEngine);
    }

    /** Engines and DDL are empty for a table that does not exist; version and clock are null when neither does. */
    private record Probe(String serverVersion, ServerClock clock, String stateEngine, String stateCreate,
                         String stateColumns, String claimsEngine) {
    }

    private record TableRow(String serverVersion, ServerClock clock, String name, String engine, String create,
                            String stateColumns) {
    }

    /** A row per table that exists: one pass over system.tables costs the server half of what a subquery each did. */
    private Probe probe(ClickHouse ch) {
        String db = Sql.literal(schema);
        long before = System.nanoTime();
        List<TableRow> rows = ch.query("SELECT version(), toUnixTimestamp64Milli(now64(3)), name, engine, "
                + "create_table_query, (SELECT arrayStringConcat(groupArray(name), ',') FROM system.columns WHERE "
                + "database = " + db + " AND table = " + Sql.literal(stateName) + ") FROM system.tables WHERE database = "
                + db + " AND name IN (" + Sql.literal(stateName) + ", " + Sql.literal(claimsName) + ")",
                rs -> new TableRow(rs.getString(1), new ServerClock(rs.getLong(2), before), rs.getString(3),
                        rs.getString(4), rs.getString(5), rs.getString(6)));
        String version = null, stateEngine = "", stateCreate = "", stateColumns = "", claimsEngine = "";
        ServerClock clock = null;
        for (TableRow row : rows) {
            version = row.serverVersion;
            clock = row.clock;
            stateColumns = row.stateColumns;
            if (row.name.equals(stateName)) {
                stateEngine = row.engine;
                stateCreate = row.create;
            } else {
                claimsEngine = row.engine;
            }
        }
        return new Probe(version, clock, stateEngine, stateCreate, stateColumns, claimsEngine);
    }
}
