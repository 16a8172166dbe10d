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

    public Tables(Settings settings) {
        this.schema = settings.schema();
        this.stateName = settings.table();
        this.claimsName = settings.table() + "_claims";
        this.state = Sql.identifier(schema) + "." + Sql.identifier(stateName);
        this.claims = Sql.identifier(schema) + "." + Sql.identifier(claimsName);
    }

    /**
     * Creates the schema database and both tables where missing, and checks an existing state table. Answers the
     * claims table's engine: the lock's guarantee holds for a plain MergeTree only (see {@link ClaimLock}).
     */
    public String ensure(ClickHouse ch) {
        ch.execute("CREATE DATABASE IF NOT EXISTS " + Sql.identifier(schema));
        ch.execute("CREATE TABLE IF NOT EXISTS " + state + " ("
                + "state_id String, partial_state Nullable(String), completed_state Nullable(String), "
                + "updated_at DateTime64(3) DEFAULT now64(3)) "
                + "ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id "
                + "SETTINGS non_replicated_deduplication_window = 1000");
        checkStateTable(ch);
        // Plain MergeTree: one part per claim, and the persisted block number gives the commit order (see BlockOrderLock).
        ch.execute("CREATE TABLE IF NOT EXISTS " + claims + " ("
                + "state_id String, token String, kind Enum8('claim' = 1, 'release' = 2), at DateTime64(3) DEFAULT now64(3)) "
                + "ENGINE = MergeTree ORDER BY (state_id, at) TTL toDateTime(at) + INTERVAL 1 DAY "
                + "SETTINGS enable_block_number_column = 1");
        return ch.queryOne("SELECT engine FROM system.tables WHERE database = " + Sql.literal(schema) + " AND name = "
                + Sql.literal(claimsName), rs -> rs.getString(1));
    }

    private void checkStateTable(ClickHouse ch) {
        String where = " WHERE database = " + Sql.literal(schema) + " AND table = " + Sql.literal(stateName);
        List<String> columns = ch.query("SELECT name FROM system.columns" + where, rs -> rs.getString(1));
        if (!columns.containsAll(STATE_COLUMNS)) {
            throw new BridgeException(ErrorCode.CONFIGURATION, "Table " + schema + "." + stateName + " exists but is not a "
                    + "state table (it needs columns " + String.join(", ", STATE_COLUMNS.stream().sorted().toList())
                    + "). Set state_backend.clickhouse.table to another name.");
        }
        String engineWhere = " WHERE database = " + Sql.literal(schema) + " AND name = " + Sql.literal(stateName);
        String[] table = ch.queryOne("SELECT engine, create_table_query FROM system.tables" + engineWhere,
                rs -> new String[] {rs.getString(1), rs.getString(2)});
        // A table the upstream add-on created has no deduplication window, so an insert the driver re-sends would add
        // a second version. With the window, a re-sent insert (same deduplication token) is a no-op. Set in place.
        if ("ReplacingMergeTree".equals(table[0]) && !table[1].contains("non_replicated_deduplication_window")) {
            ch.execute("ALTER TABLE " + state + " MODIFY SETTING non_replicated_deduplication_window = 1000");
        }
    }
}
