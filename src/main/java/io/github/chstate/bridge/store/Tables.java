package io.github.chstate.bridge.store;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.ServerErrors;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.lock.LockTables;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.List;
import java.util.Set;

/**
 * The state and history tables and their DDL. The state table is the upstream add-on's, unchanged, so either can
 * read what the other wrote; the lock tables are in {@link LockTables}. The history table {@code <table>_history} gets every row written to the state table from a materialized view, on
 * the server, within the same INSERT: no statement more for the pipeline.
 */
public final class Tables {
    static final Set<String> STATE_COLUMNS = Set.of("state_id", "partial_state", "completed_state", "updated_at");
    private static final String OLD_WINDOW = "non_replicated_deduplication_window = 1000";
    private static final Logger log = LoggerFactory.getLogger(Tables.class);

    final String schema;
    final String state;
    final String history;
    final int historyDays;
    private final String historyView;
    private final String stateName;
    private final String historyName;
    private final String historyViewName;
    private final String cluster;
    private final String onCluster;
    private final LockTables locks;

    public Tables(Settings settings) {
        this.schema = settings.schema();
        this.stateName = settings.table();
        this.state = Sql.identifier(schema) + "." + Sql.identifier(stateName);
        this.historyName = settings.table() + "_history";
        this.historyViewName = settings.table() + "_history_mv";
        this.history = Sql.identifier(schema) + "." + Sql.identifier(historyName);
        this.historyView = Sql.identifier(schema) + "." + Sql.identifier(historyViewName);
        this.historyDays = settings.historyDays();
        this.cluster = settings.cluster();
        this.onCluster = Sql.onCluster(cluster);
        this.locks = new LockTables(settings);
    }

    /**
     * The schema and state table, as the upstream add-on creates it on a single node; a cluster gets
     * {@code ON CLUSTER} and a Replicated engine, and Cloud a plain engine it makes Shared.
     */
    List<String> stateStatements(Deployment deployment) {
        String engine = switch (deployment) {
            case SINGLE_NODE, SHARED -> "ReplacingMergeTree(updated_at) ORDER BY state_id";
            case REPLICATED -> cluster == null ? "ReplacingMergeTree(updated_at) ORDER BY state_id" // a Replicated database
                    : "ReplicatedReplacingMergeTree(" + Sql.REPLICA_PATH + ", updated_at) ORDER BY state_id";
        };
        return List.of(
                "CREATE DATABASE IF NOT EXISTS " + Sql.identifier(schema) + onCluster,
                "CREATE TABLE IF NOT EXISTS " + state + onCluster + " (state_id String, partial_state Nullable(String), "
                        + "completed_state Nullable(String), updated_at DateTime64(3) DEFAULT now64(3)) ENGINE = " + engine);
    }

    /** Every state written, by id and version, for {@code history_days} days. */
    String historyStatement() {
        return "CREATE TABLE IF NOT EXISTS " + history + onCluster + " (state_id String, partial_state Nullable(String), "
                + "completed_state Nullable(String), updated_at DateTime64(3)) ENGINE = "
                + Sql.mergeTree(cluster) + " ORDER BY (state_id, updated_at) " + historyTtl();
    }

    private String historyTtl() {
        return "TTL toDateTime(updated_at) + INTERVAL " + historyDays + " DAY";
    }

    /** Copies each block inserted into the state table to the history table. */
    String historyViewStatement() {
        return "CREATE MATERIALIZED VIEW IF NOT EXISTS " + historyView + onCluster + " TO " + history
                + " AS SELECT state_id, partial_state, completed_state, updated_at FROM " + state;
    }

    /** What {@link #ensure} found: the server's version and clock, the deployment, and which lock tables exist. */
    public record Found(String serverVersion, ServerClock clock, Deployment deployment, LockTables.Found locks) {
    }

    /** The lock tables beside the state table (their names are looked up with the state table's, in one query). */
    public LockTables locks() {
        return locks;
    }

    /**
     * Creates the schema database and the state table where missing, brings an existing one up to date, and checks
     * it. When the tables exist, as on every start but the first, this is a single query.
     */
    public Found ensure(ClickHouse ch) {
        Probe probe = probe(ch);
        if (probe.stateEngine.isEmpty()) {
            stateStatements(Deployment.decide("", cluster, probe.cloud).deployment()).forEach(ch::execute);
            probe = probe(ch);
        }
        if (!List.of(probe.stateColumns.split(",")).containsAll(STATE_COLUMNS)) {
            throw new BridgeException(ErrorCode.CONFIGURATION, "Table " + schema + "." + stateName + " exists but is not a "
                    + "state table (it needs columns " + String.join(", ", STATE_COLUMNS.stream().sorted().toList())
                    + "). Set state_backend.clickhouse.table to another name.");
        }
        // Earlier versions of the bridge gave a single node's table this window. The upstream add-on's writes carry
        // no deduplication token, so with it, a write equal to one of its last 1000 (A -> B -> A) was dropped. Our own
        // re-sent inserts need no window: the version check in each INSERT refuses a second copy.
        if ("ReplacingMergeTree".equals(probe.stateEngine) && probe.stateCreate.contains(OLD_WINDOW)) {
            resetOldWindow(ch);
        }
        ensureHistory(ch, probe);
        return new Found(probe.serverVersion, probe.clock, Deployment.decide(probe.stateEngine, cluster, probe.cloud).deployment(),
                new LockTables.Found(probe.claimsEngine, probe.keeperLockExists));
    }

    /**
     * A user who may not ALTER the table (a runtime user beside the admin who created it) still works: the window
     * changes nothing for our writes, only for the upstream add-on's, so an admin is asked to take it off.
     */
    private void resetOldWindow(ClickHouse ch) {
        String sql = "ALTER TABLE " + state + onCluster + " RESET SETTING non_replicated_deduplication_window";
        try {
            ch.execute(sql);
        } catch (BridgeException e) {
            if (!ServerErrors.isAccessDenied(e)) {
                throw e;
            }
            log.warn("The state table {}.{} has the deduplication window of earlier versions of this backend, which "
                    + "drops the upstream add-on's repeated writes, and this user may not remove it. If the add-on "
                    + "still writes this table, have an admin run: {}", schema, stateName, sql);
        }
    }

    /**
     * History on: the table (with the TTL of {@code history_days}) and its view, added in place where missing. A new
     * table starts with the current states, so that the first restore has something to go back to. History off:
     * the view is dropped, the table and what it holds are kept.
     */
    private void ensureHistory(ClickHouse ch, Probe probe) {
        if (historyDays == 0) {
            if (probe.historyViewExists) {
                ch.execute("DROP VIEW IF EXISTS " + historyView + onCluster);
            }
            return;
        }
        boolean created = probe.historyCreate.isEmpty();
        if (created) {
            ch.execute(historyStatement());
        } else if (!probe.historyCreate.contains("toIntervalDay(" + historyDays + ")")) {
            ch.execute("ALTER TABLE " + history + onCluster + " MODIFY " + historyTtl());
        }
        if (!probe.historyViewExists) {
            ch.execute(historyViewStatement());
        }
        if (created) { // after the view: a write meanwhile is in the history once, from the view
            ch.execute("INSERT INTO " + history + " SELECT state_id, partial_state, completed_state, updated_at FROM "
                    + state + " FINAL WHERE (state_id, updated_at) NOT IN (SELECT state_id, updated_at FROM " + history + ")");
        }
    }

    /** Engines and DDL are empty for a table that does not exist. */
    private record Probe(String serverVersion, ServerClock clock, boolean cloud, String stateEngine, String stateCreate,
                         String stateColumns, String claimsEngine, boolean keeperLockExists, String historyCreate,
                         boolean historyViewExists) {
    }

    private record TableRow(String serverVersion, ServerClock clock, boolean cloud, String name, String engine,
                            String create, String stateColumns) {
    }

    /**
     * A row per table that exists, and one with an empty name that is always there: one pass over system.tables costs
     * the server half of what a subquery per table did.
     */
    private Probe probe(ClickHouse ch) {
        String db = Sql.literal(schema);
        long before = ch.clock().nanos();
        List<TableRow> rows = ch.query("SELECT version(), toUnixTimestamp64Milli(now64(3)), "
                + "(SELECT count() FROM system.settings WHERE name = 'cloud_mode' AND value = '1'), t.name, t.engine, "
                + "t.create_table_query, (SELECT arrayStringConcat(groupArray(name), ',') FROM system.columns WHERE "
                + "database = " + db + " AND table = " + Sql.literal(stateName) + ") FROM (SELECT name, engine, "
                + "create_table_query FROM system.tables WHERE database = " + db + " AND name IN ("
                + Sql.literal(stateName) + ", " + Sql.literal(locks.claimsName) + ", " + Sql.literal(locks.keeperLockName) + ", "
                + Sql.literal(historyName) + ", " + Sql.literal(historyViewName) + ") UNION ALL SELECT '', '', '') AS t",
                rs -> new TableRow(rs.getString(1), new ServerClock(rs.getLong(2), before, ch.clock()), rs.getLong(3) > 0,
                        rs.getString(4), rs.getString(5), rs.getString(6), rs.getString(7)));
        String stateEngine = "", stateCreate = "", claimsEngine = "", historyCreate = "";
        boolean keeperLockExists = false, historyViewExists = false;
        for (TableRow row : rows) {
            if (row.name.equals(stateName)) {
                stateEngine = row.engine;
                stateCreate = row.create;
            } else if (row.name.equals(locks.claimsName)) {
                claimsEngine = row.engine;
            } else if (row.name.equals(locks.keeperLockName)) {
                keeperLockExists = true;
            } else if (row.name.equals(historyName)) {
                historyCreate = row.create;
            } else if (row.name.equals(historyViewName)) {
                historyViewExists = true;
            }
        }
        TableRow any = rows.get(0);
        return new Probe(any.serverVersion, any.clock, any.cloud, stateEngine, stateCreate, any.stateColumns,
                claimsEngine, keeperLockExists, historyCreate, historyViewExists);
    }
}
