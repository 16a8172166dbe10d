package io.github.chstate.bridge.store;

import io.github.chstate.bridge.config.SettingsParser;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The DDL as text for the three deployments; the single-node DDL also runs in every integration test, the KeeperMap
 * table's on the local servers with Keeper, the cluster and Cloud DDL only here.
 */
class TablesTest {
    private static Tables tables(Map<String, Object> extra) {
        Map<String, Object> settings = new java.util.HashMap<>(Map.of("uri", "clickhouse://u@h/db", "schema", "st", "table", "t"));
        settings.putAll(extra);
        return new Tables(SettingsParser.parse(settings));
    }

    @Test
    void singleNodeUsesTheUpstreamAddOnsPlainEngine() {
        Tables tables = tables(Map.of());
        List<String> ddl = tables.stateStatements(Deployment.SINGLE_NODE);
        assertEquals("CREATE DATABASE IF NOT EXISTS `st`", ddl.get(0));
        assertTrue(ddl.get(1).startsWith("CREATE TABLE IF NOT EXISTS `st`.`t` ("), ddl.get(1));
        assertTrue(ddl.get(1).endsWith("ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id"), ddl.get(1));
        String claims = tables.locks().claimsStatement();
        assertTrue(claims.startsWith("CREATE TABLE IF NOT EXISTS `st`.`t_claims` ("), claims);
        assertTrue(claims.contains("ENGINE = MergeTree ORDER BY (state_id, at)"));
        assertTrue(claims.endsWith("SETTINGS enable_block_number_column = 1"));
        assertEquals("CREATE TABLE IF NOT EXISTS `st`.`t_keeper_lock` (state_id String, token String, "
                + "at DateTime64(3) DEFAULT now64(3), wanted DateTime64(3) DEFAULT 0) "
                + "ENGINE = KeeperMap('/meltano_state/st/t') PRIMARY KEY state_id", tables.locks().keeperLockStatement());
    }

    @Test
    void theHistoryTableKeepsHistoryDaysAndIsFilledByAViewOfTheStateTable() {
        assertEquals("CREATE TABLE IF NOT EXISTS `st`.`t_history` (state_id String, partial_state Nullable(String), "
                + "completed_state Nullable(String), updated_at DateTime64(3)) ENGINE = MergeTree ORDER BY (state_id, "
                + "updated_at) TTL toDateTime(updated_at) + INTERVAL 30 DAY", tables(Map.of()).historyStatement());
        assertTrue(tables(Map.of("history_days", 400)).historyStatement().endsWith("INTERVAL 400 DAY"));
        assertEquals("CREATE MATERIALIZED VIEW IF NOT EXISTS `st`.`t_history_mv` TO `st`.`t_history` AS SELECT "
                + "state_id, partial_state, completed_state, updated_at FROM `st`.`t`", tables(Map.of()).historyViewStatement());
        Tables cluster = tables(Map.of("cluster", "prod-cluster"));
        assertTrue(cluster.historyStatement().contains("`st`.`t_history` ON CLUSTER `prod-cluster` ("));
        assertTrue(cluster.historyStatement().contains("ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')"));
        assertTrue(cluster.historyViewStatement().contains("`st`.`t_history_mv` ON CLUSTER `prod-cluster` TO"));
    }

    @Test
    void aClusterGetsOnClusterDdlAndReplicatedEngines() {
        Tables tables = tables(Map.of("cluster", "prod-cluster"));
        List<String> ddl = tables.stateStatements(Deployment.REPLICATED);
        assertEquals("CREATE DATABASE IF NOT EXISTS `st` ON CLUSTER `prod-cluster`", ddl.get(0));
        assertTrue(ddl.get(1).contains("`st`.`t` ON CLUSTER `prod-cluster` ("), ddl.get(1));
        assertTrue(ddl.get(1).endsWith("ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', updated_at) ORDER BY state_id"));
        assertTrue(tables.locks().claimsStatement().contains("`st`.`t_claims` ON CLUSTER `prod-cluster` ("));
        assertTrue(tables.locks().claimsStatement().contains("ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')"));
        // One path for all servers: each server's table reads and writes the same Keeper nodes.
        assertTrue(tables.locks().keeperLockStatement().startsWith("CREATE TABLE IF NOT EXISTS `st`.`t_keeper_lock` ON CLUSTER `prod-cluster` ("));
        assertTrue(tables.locks().keeperLockStatement().endsWith("ENGINE = KeeperMap('/meltano_state/st/t') PRIMARY KEY state_id"));
    }

    @Test
    void cloudGetsPlainEnginesWithoutSettingsASharedEngineRefuses() {
        Tables tables = tables(Map.of());
        List<String> ddl = tables.stateStatements(Deployment.SHARED);
        assertEquals("CREATE DATABASE IF NOT EXISTS `st`", ddl.get(0));
        assertTrue(ddl.get(1).endsWith("ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id"), ddl.get(1));
        assertFalse(String.join(" ", ddl).contains("non_replicated"));
        assertFalse(tables.locks().keeperLockStatement().contains("ON CLUSTER"));
    }

    @Test
    void theDeploymentComesFromTheEngineAndDecidesReadAndInsertSettings() {
        assertEquals(Deployment.SHARED, Deployment.decide("SharedReplacingMergeTree", null, true).deployment());
        assertEquals(Deployment.REPLICATED, Deployment.decide("ReplicatedReplacingMergeTree", null, false).deployment());
        assertEquals(Deployment.SINGLE_NODE, Deployment.decide("ReplacingMergeTree", "c", true).deployment());
        assertEquals(Deployment.REPLICATED, Deployment.decide("", "c", true).deployment());
        assertEquals(Deployment.SHARED, Deployment.decide("", null, true).deployment());
        assertEquals(Deployment.SINGLE_NODE, Deployment.decide("", null, false).deployment());
        assertEquals("", Deployment.SINGLE_NODE.readClause());
        assertEquals(Map.of(), Deployment.SINGLE_NODE.insertSettings());
        assertEquals(" SETTINGS select_sequential_consistency = 1", Deployment.SHARED.readClause());
        assertEquals(Map.of("select_sequential_consistency", "1"), Deployment.SHARED.insertSettings());
        assertEquals(" SETTINGS select_sequential_consistency = 1", Deployment.REPLICATED.readClause());
        assertEquals(Map.of("insert_quorum", "auto", "insert_quorum_parallel", "0", "select_sequential_consistency", "1"),
                Deployment.REPLICATED.insertSettings());
    }
}
