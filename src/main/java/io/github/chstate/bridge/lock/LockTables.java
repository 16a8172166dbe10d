package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.ServerErrors;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.error.BridgeException;

/**
 * The two lock tables beside the state table, each created only where its lock is used: {@code <table>_claims} of
 * {@link ClaimLock} and the KeeperMap table {@code <table>_keeper_lock} of {@link KeeperLock}. (The upstream add-on's
 * {@code <table>_lock} has another layout and is left alone.)
 */
public final class LockTables {
    /** Names as in system.tables, for the store's one query over the tables at start. */
    public final String claimsName;
    public final String keeperLockName;
    final String claims;
    final String keeperLock;
    private final String keeperPath;
    private final String cluster;

    /** Which lock tables exist (a claims engine of "" when there is none). */
    public record Found(String claimsEngine, boolean keeperLockExists) {
    }

    public LockTables(Settings settings) {
        this.claimsName = settings.table() + "_claims";
        this.keeperLockName = settings.table() + "_keeper_lock";
        this.claims = Sql.identifier(settings.schema()) + "." + Sql.identifier(claimsName);
        this.keeperLock = Sql.identifier(settings.schema()) + "." + Sql.identifier(keeperLockName);
        // Under the server's keeper_map_path_prefix; the same on every server, so that all of them share the rows.
        this.keeperPath = "/meltano_state/" + settings.schema() + "/" + settings.table();
        this.cluster = settings.cluster();
    }

    /** One part per claim; the persisted block number gives the commit order ({@link ClaimLock}). */
    public String claimsStatement() {
        return "CREATE TABLE IF NOT EXISTS " + claims + Sql.onCluster(cluster) + " (state_id String, token String, "
                + "kind Enum8('claim' = 1, 'release' = 2), at DateTime64(3) DEFAULT now64(3)) ENGINE = "
                + Sql.mergeTree(cluster) + " ORDER BY (state_id, at) TTL toDateTime(at) + INTERVAL 1 DAY SETTINGS "
                + "enable_block_number_column = 1";
    }

    /** A row per state id, kept in Keeper ({@link KeeperLock}); the same on every deployment. */
    public String keeperLockStatement() {
        return "CREATE TABLE IF NOT EXISTS " + keeperLock + Sql.onCluster(cluster) + " (state_id String, token String, "
                + "at DateTime64(3) DEFAULT now64(3), wanted DateTime64(3) DEFAULT 0) "
                + "ENGINE = KeeperMap(" + Sql.literal(keeperPath) + ") PRIMARY KEY state_id";
    }

    /** Creates the claims table if missing; answers its engine. */
    String ensureClaims(ClickHouse ch, Found found) {
        if (!found.claimsEngine().isEmpty()) {
            return found.claimsEngine();
        }
        ch.execute(claimsStatement());
        return cluster != null ? "ReplicatedMergeTree" : "MergeTree";
    }

    /** Creates the KeeperMap lock table if missing; false when the server has no KeeperMap (code 36, no prefix). */
    boolean ensureKeeperLock(ClickHouse ch, Found found) {
        if (found.keeperLockExists()) {
            return true;
        }
        try {
            ch.execute(keeperLockStatement());
            return true;
        } catch (BridgeException e) {
            if (ServerErrors.isNoKeeperMap(e)) {
                return false;
            }
            throw e;
        }
    }
}
