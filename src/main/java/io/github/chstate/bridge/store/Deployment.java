package io.github.chstate.bridge.store;

import java.util.Map;

/**
 * What kind of ClickHouse holds the state table, told by the engine the server gave it: {@code Shared*} (ClickHouse
 * Cloud makes every MergeTree one), {@code Replicated*} (the {@code cluster} setting, or a Replicated database), else
 * a single node. Before the table exists, the {@code cluster} setting and the server's {@code cloud_mode} tell.
 * It decides the DDL and what a read that must see the newest write needs.
 */
public enum Deployment {
    /** A plain ReplacingMergeTree: an insert is visible to every later read once it returns. */
    SINGLE_NODE(Map.of(), ""),
    /**
     * Replicated tables: another replica sees an insert only once it has fetched it, unless the insert waited for a
     * quorum; then {@code select_sequential_consistency} makes a read see every quorum write, or fail.
     * {@code insert_quorum_parallel = 0} is what that guarantee needs (ClickHouse's docs); it makes a second insert
     * into the table wait while the first one's quorum is pending. An insert reads too (the newest stored version, in
     * its condition), so it carries the read setting as well.
     */
    REPLICATED(Map.of("insert_quorum", "auto", "insert_quorum_parallel", "0", "select_sequential_consistency", "1"),
            "select_sequential_consistency = 1"),
    /** SharedMergeTree: every insert is a quorum write, but replicas fetch parts later; the read must ask Keeper. */
    SHARED(Map.of("select_sequential_consistency", "1"), "select_sequential_consistency = 1");

    private final Map<String, String> insertSettings;
    private final String readSetting;

    Deployment(Map<String, String> insertSettings, String readSetting) {
        this.insertSettings = insertSettings;
        this.readSetting = readSetting;
    }

    /** A deployment and why it is the one: for {@code check} to say. */
    public record Decided(Deployment deployment, String why) {
    }

    /**
     * The one place that tells the deployment, for {@code initialize} and {@code check} alike: the state table's engine
     * once it exists ({@code stateEngine}, "" before), else the {@code cluster} setting, else the server's cloud_mode.
     */
    public static Decided decide(String stateEngine, String cluster, boolean cloud) {
        if (!stateEngine.isEmpty()) {
            Deployment d = stateEngine.startsWith("Shared") ? SHARED
                    : stateEngine.startsWith("Replicated") ? REPLICATED : SINGLE_NODE;
            return new Decided(d, "the state table's engine is " + stateEngine);
        }
        if (cluster != null) {
            return new Decided(REPLICATED, "the cluster setting is '" + cluster + "' (the state table does not exist yet)");
        }
        return cloud ? new Decided(SHARED, "the server runs with cloud_mode")
                : new Decided(SINGLE_NODE, "no cluster setting, no cloud_mode");
    }

    public boolean replicated() {
        return this != SINGLE_NODE;
    }

    /** The SETTINGS clause of a SELECT that must see the newest write; empty where any read does. */
    String readClause() {
        return readSetting.isEmpty() ? "" : " SETTINGS " + readSetting;
    }

    /** What an INSERT of state needs beside its own settings. */
    Map<String, String> insertSettings() {
        return insertSettings;
    }
}
