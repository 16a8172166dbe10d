package io.github.chstate.bridge.store;

import io.github.chstate.bridge.config.SettingsParser;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The DDL as text; the single-node DDL also runs in every integration test, the cluster DDL only here. */
class TablesTest {
    private static List<String> ddl(Map<String, Object> extra) {
        Map<String, Object> settings = new java.util.HashMap<>(Map.of("uri", "clickhouse://u@h/db", "schema", "st", "table", "t"));
        settings.putAll(extra);
        return new Tables(SettingsParser.parse(settings)).createStatements();
    }

    @Test
    void singleNodeUsesPlainEnginesWithADeduplicationWindow() {
        List<String> ddl = ddl(Map.of());
        assertEquals("CREATE DATABASE IF NOT EXISTS `st`", ddl.get(0));
        assertTrue(ddl.get(1).startsWith("CREATE TABLE IF NOT EXISTS `st`.`t` ("), ddl.get(1));
        assertTrue(ddl.get(1).contains("ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id SETTINGS non_replicated_deduplication_window = 1000"));
        assertTrue(ddl.get(2).startsWith("CREATE TABLE IF NOT EXISTS `st`.`t_claims` ("), ddl.get(2));
        assertTrue(ddl.get(2).contains("ENGINE = MergeTree ORDER BY (state_id, at)"));
        assertTrue(ddl.get(2).endsWith("SETTINGS enable_block_number_column = 1"));
    }

    @Test
    void aClusterGetsOnClusterDdlAndReplicatedEngines() {
        List<String> ddl = ddl(Map.of("cluster", "prod-cluster"));
        assertEquals("CREATE DATABASE IF NOT EXISTS `st` ON CLUSTER `prod-cluster`", ddl.get(0));
        assertTrue(ddl.get(1).contains("`st`.`t` ON CLUSTER `prod-cluster` ("), ddl.get(1));
        assertTrue(ddl.get(1).contains("ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', updated_at) ORDER BY state_id"));
        assertTrue(!ddl.get(1).contains("non_replicated"));
        assertTrue(ddl.get(2).contains("`st`.`t_claims` ON CLUSTER `prod-cluster` ("));
        assertTrue(ddl.get(2).contains("ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')"));
    }
}
