package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.config.SettingsParser;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StoredState;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class StateStoreIntegrationTest {
    private final ObjectMapper json = Json.mapper();
    private Map<String, Object> settings;
    private BridgeService bridge;

    @BeforeEach
    void connect() {
        settings = ClickHouseEndpoint.settings();
        bridge = new BridgeService(json);
        Map<String, Object> answer = bridge.initialize(settings);
        assertEquals("1", answer.get("protocol_version"));
        assertTrue(answer.get("clickhouse_version").toString().matches("\\d+\\..*"), answer.toString());
    }

    @AfterEach
    void close() {
        bridge.close();
    }

    /** A part as the shim sends it: compact JSON text. */
    private StatePart obj(String text) throws Exception {
        return StatePart.of(json.readTree(text).toString());
    }

    @Test
    void unknownIdIsNullAndEmptyPartsComeBackEmpty() throws Exception {
        assertNull(bridge.get("nope"));
        bridge.set("a", null, obj("{\"singer_state\":{\"x\":1}}"));
        StoredState got = bridge.get("a");
        assertEquals(StatePart.EMPTY, got.partial());
        assertEquals(obj("{\"singer_state\":{\"x\":1}}"), got.completed());
    }

    @Test
    void setOverwritesAndTheLastOfQuickRewritesWins() throws Exception {
        // A -> B -> A in quick succession: same millisecond, identical blocks; the last one must stay visible.
        for (int round = 0; round < 20; round++) {
            bridge.set("s", obj("{\"v\":\"A\"}"), null);
            bridge.set("s", obj("{\"v\":\"B\"}"), null);
            bridge.set("s", obj("{\"v\":\"A\"}"), null);
            assertEquals(obj("{\"v\":\"A\"}"), bridge.get("s").partial());
            bridge.set("s", obj("{\"v\":\"B\"}"), obj("{\"c\":" + round + "}"));
            assertEquals(obj("{\"v\":\"B\"}"), bridge.get("s").partial());
            assertEquals(obj("{\"c\":" + round + "}"), bridge.get("s").completed());
        }
    }

    @Test
    void underTheLockTheLastWriteWinsAlsoOverOthersWritingWithoutIt() throws Exception {
        // Meltano's update sets under the lock; `meltano state import` (set_all) and delete do not lock. With a write
        // interval the bridge under the lock answers from what it set (WriteIntervalIntegrationTest); without, this.
        bridge.close();
        settings.put("write_interval_seconds", 0);
        bridge.initialize(settings);
        try (BridgeService other = new BridgeService(json)) {
            other.initialize(settings);
            for (int round = 0; round < 10; round++) {
                String token = bridge.acquireLock("mixed", 0.05);
                bridge.get("mixed");
                bridge.set("mixed", null, obj("{\"by\":\"locked\",\"round\":" + round + "}"));
                other.setAll(List.of(new StoredState("mixed", null, obj("{\"by\":\"import\"}"))));
                assertEquals(obj("{\"by\":\"import\"}"), bridge.get("mixed").completed());
                bridge.set("mixed", null, obj("{\"by\":\"locked again\"}"));
                assertEquals(obj("{\"by\":\"locked again\"}"), other.get("mixed").completed());
                other.delete("mixed");
                bridge.set("mixed", null, obj("{\"by\":\"after delete\"}"));
                assertEquals(obj("{\"by\":\"after delete\"}"), other.get("mixed").completed());
                bridge.releaseLock(token);
            }
        }
    }

    @Test
    void aSeriesOfUnlockedGetsAsMeltanoStateListSendsItIsAnsweredExactlyAcrossReadsAhead() throws Exception {
        // 2,500 ids listed and got one by one: reads ahead of 1,000 rows or 4 MiB (three states of 1.5 MB cut one),
        // ids without a state among them, and a write of this bridge seen by the very next get (listed again).
        List<StoredState> states = new java.util.ArrayList<>();
        String big = "x".repeat(1_500_000);
        for (int i = 0; i < 2500; i++) {
            if (i % 7 != 3) {
                String value = i % 1000 == 500 ? big : String.valueOf(i);
                states.add(new StoredState(String.format("ra:%04d", i), null, obj("{\"v\":\"" + value + "\"}")));
            }
        }
        assertEquals(states.size(), bridge.setAll(states));
        Map<String, StoredState> byId = new java.util.HashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s));
        assertEquals(states.size(), bridge.getStateIds("ra:*").size());
        for (int i = 0; i < 2500; i++) {
            String id = String.format("ra:%04d", i);
            StoredState got = bridge.get(id);
            if (byId.containsKey(id)) {
                assertEquals(byId.get(id).completed(), got.completed(), id);
            } else {
                assertNull(got, id);
            }
            if (i == 1200) {
                bridge.set("ra:1201", null, obj("{\"v\":\"new\"}"));
                byId.put("ra:1201", new StoredState("ra:1201", null, obj("{\"v\":\"new\"}")));
                bridge.getStateIds("ra:*");
            }
        }
    }

    @Test
    void aWriteLandsAboveAStoredVersionAheadOfTheServersClock() throws Exception {
        // Another writer's clock an hour ahead: the insert's own check refuses the first try, the query after it finds
        // the newer version, and the next try lands above it; with and without the lock.
        try (ClickHouse ch = new ClickHouse(SettingsParser.parse(settings))) {
            for (String by : List.of("unlocked", "locked")) {
                ch.execute("INSERT INTO `" + settings.get("schema") + "`.state (state_id, partial_state, completed_state, "
                        + "updated_at) VALUES ('ahead', NULL, '{\"by\":\"the future\"}', now64(3) + INTERVAL 1 HOUR)");
                if (by.equals("locked")) {
                    String token = bridge.acquireLock("ahead", 0.05);
                    bridge.set("ahead", null, obj("{\"by\":\"locked\"}"));
                    bridge.releaseLock(token);
                } else {
                    bridge.set("ahead", null, obj("{\"by\":\"unlocked\"}"));
                }
                assertEquals(obj("{\"by\":\"" + by + "\"}"), bridge.get("ahead").completed());
            }
        }
    }

    @Test
    void deleteThenSetTheSameStateIsKept() throws Exception {
        bridge.set("d", null, obj("{\"x\":1}"));
        bridge.delete("d");
        assertNull(bridge.get("d"));
        bridge.set("d", null, obj("{\"x\":1}"));
        assertEquals(obj("{\"x\":1}"), bridge.get("d").completed());
    }

    @Test
    void patternsAreAnchoredGlobsAndSqlWildcardsMatchLiterally() throws Exception {
        List<String> ids = List.of("dev:tap-a-to-b", "dev:tap-c-to-b", "prod:tap-a-to-b", "100%_done", "100xydone",
                "back\\slash", "quote'd", "ünï-cødé", "multiple-complete", "a-multiple-complete");
        for (String id : ids) {
            bridge.set(id, null, obj("{\"id\":" + json.writeValueAsString(id) + "}"));
        }
        assertEquals(List.of("dev:tap-a-to-b", "dev:tap-c-to-b"), bridge.getStateIds("dev:*"));
        assertEquals(List.of("dev:tap-a-to-b"), bridge.getStateIds("dev:tap-?-to-b").subList(0, 1));
        assertEquals(List.of("dev:tap-a-to-b", "dev:tap-c-to-b"), bridge.getStateIds("dev:tap-?-to-b"));
        assertEquals(List.of("100%_done"), bridge.getStateIds("100%_done"));
        assertEquals(List.of("100%_done"), bridge.getStateIds("100%*"));
        assertEquals(List.of("back\\slash"), bridge.getStateIds("back\\slash"));
        assertEquals(List.of("quote'd"), bridge.getStateIds("quote'*"));
        assertEquals(List.of("ünï-cødé"), bridge.getStateIds("?nï-c?dé"));
        assertEquals(List.of("multiple-complete"), bridge.getStateIds("multiple-complete"));
        assertEquals(List.of("a-multiple-complete", "multiple-complete"), bridge.getStateIds("*multiple-complete"));
        assertEquals(List.of(), bridge.getStateIds("tap-a"));
        assertEquals(ids.size(), bridge.getStateIds(null).size());
        assertEquals(ids.size(), bridge.getStateIds("*").size());
        for (String id : ids) {
            assertEquals(id, json.readTree(bridge.get(id).completed().text()).get("id").asText());
        }
    }

    @Test
    void bulkCallsAndClearAllCount() throws Exception {
        int written = bridge.setAll(List.of(
                new StoredState("b:1", obj("{\"p\":1}"), null),
                new StoredState("b:2", null, obj("{\"c\":2}")),
                new StoredState("b:1", obj("{\"p\":3}"), null),
                new StoredState("other", null, obj("{\"c\":4}"))));
        assertEquals(3, written);
        List<StoredState> all = bridge.getAll("b:*");
        assertEquals(List.of("b:1", "b:2"), all.stream().map(StoredState::stateId).toList());
        assertEquals(obj("{\"p\":3}"), all.get(0).partial());
        assertEquals(obj("{\"c\":2}"), all.get(1).completed());
        assertEquals(3, bridge.clearAll());
        assertEquals(List.of(), bridge.getStateIds(null));
        assertEquals(0, bridge.clearAll());
    }

    /** These tests' settings with another schema. */
    private Map<String, Object> inSchema(String schema) {
        Map<String, Object> moved = new java.util.HashMap<>(settings);
        moved.put("schema", schema);
        return moved;
    }

    /** The state table as the upstream add-on creates it, with {@code settingsClause} after its engine. */
    private static void createUpstreamStateTable(ClickHouse ch, String schema, String settingsClause) {
        ch.execute("CREATE DATABASE IF NOT EXISTS " + schema);
        ch.execute("CREATE TABLE " + schema + ".state (state_id String, partial_state Nullable(String), "
                + "completed_state Nullable(String), updated_at DateTime64(3) DEFAULT now64(3)) "
                + "ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id" + settingsClause);
    }

    @Test
    void readsTheTablesTheUpstreamAddOnWrote() throws Exception {
        // The upstream add-on's DDL and rows, as it writes them: empty parts as NULL, updated_at from now64(3).
        String schema = "up_" + settings.get("schema");
        Map<String, Object> upstream = inSchema(schema);
        try (ClickHouse ch = new ClickHouse(SettingsParser.parse(upstream))) {
            createUpstreamStateTable(ch, schema, "");
            ch.execute("CREATE TABLE " + schema + ".state_lock (state_id String, lock_id String, locked_at DateTime DEFAULT now()) "
                    + "ENGINE = ReplacingMergeTree(locked_at) ORDER BY state_id TTL locked_at + INTERVAL 300 SECOND");
            ch.execute("INSERT INTO " + schema + ".state (state_id, partial_state, completed_state) VALUES "
                    + "('dev:old', NULL, '{\"singer_state\": {\"bookmarks\": {\"t\": {\"id\": 1}}}}')");
            ch.execute("INSERT INTO " + schema + ".state (state_id, partial_state, completed_state, updated_at) VALUES "
                    + "('dev:old', NULL, '{\"singer_state\": {\"bookmarks\": {\"t\": {\"id\": 7}}}}', now64(3) + 1)");
            ch.execute("INSERT INTO " + schema + ".state (state_id, partial_state, completed_state) VALUES "
                    + "('dev:partial', '{\"singer_state\": {\"p\": 1}}', NULL)");
        }
        BridgeService reader = new BridgeService(json);
        try (reader) {
            reader.initialize(upstream);
            assertEquals(List.of("dev:old", "dev:partial"), reader.getStateIds("dev:*"));
            // The upstream add-on's text (Python's json.dumps) comes back as it is
            assertEquals(StatePart.of("{\"singer_state\": {\"bookmarks\": {\"t\": {\"id\": 7}}}}"), reader.get("dev:old").completed());
            assertEquals(StatePart.EMPTY, reader.get("dev:old").partial());
            assertEquals(StatePart.of("{\"singer_state\": {\"p\": 1}}"), reader.get("dev:partial").partial());
            // A write of ours lands over the upstream row, whose version may be ahead of our clock.
            reader.set("dev:old", null, obj("{\"singer_state\":{\"bookmarks\":{\"t\":{\"id\":8}}}}"));
            assertEquals(obj("{\"singer_state\":{\"bookmarks\":{\"t\":{\"id\":8}}}}"), reader.get("dev:old").completed());
        }
    }

    @Test
    void theUpstreamAddOnsRewritesStillLandOnATableTheBridgeOpened() throws Exception {
        // The add-on sends no version and no deduplication token: with a deduplication window on the table (earlier
        // bridges added one), its A -> B -> A left B. The bridge now takes that window off and never adds it.
        String schema = "upw_" + settings.get("schema");
        Map<String, Object> upstream = inSchema(schema);
        try (ClickHouse ch = new ClickHouse(SettingsParser.parse(upstream))) {
            createUpstreamStateTable(ch, schema, " SETTINGS non_replicated_deduplication_window = 1000");
            try (BridgeService bridge = new BridgeService(json)) {
                bridge.initialize(upstream);
            }
            for (String n : List.of("1", "2", "1")) { // the add-on's insert, as it sends it
                ch.execute("INSERT INTO " + schema + ".state (state_id, partial_state, completed_state) VALUES "
                        + "('dev:aba', NULL, '{\"n\": " + n + "}')");
            }
            assertEquals("{\"n\": 1}", ch.queryOne("SELECT completed_state FROM " + schema + ".state FINAL WHERE "
                    + "state_id = 'dev:aba'", rs -> rs.getString(1)));
            assertFalse(ch.queryOne("SELECT create_table_query FROM system.tables WHERE database = '" + schema
                    + "' AND name = 'state'", rs -> rs.getString(1)).contains("deduplication_window"));
        }
    }

    @Test
    void aTableOfAnotherShapeIsRefusedAndLeftAlone() {
        Map<String, Object> other = new java.util.HashMap<>(settings);
        other.put("table", "not_state");
        try (ClickHouse ch = new ClickHouse(SettingsParser.parse(other))) {
            ch.execute("CREATE DATABASE IF NOT EXISTS " + other.get("schema"));
            ch.execute("CREATE TABLE " + other.get("schema") + ".not_state (x UInt8) ENGINE = MergeTree ORDER BY x");
            ch.execute("INSERT INTO " + other.get("schema") + ".not_state VALUES (1)");
            BridgeService b = new BridgeService(json);
            BridgeException e = assertThrows(BridgeException.class, () -> b.initialize(other));
            assertEquals(ErrorCode.CONFIGURATION, e.code());
            assertTrue(e.getMessage().contains("not_state"), e.getMessage());
            assertEquals(Long.valueOf(1), ch.queryOne("SELECT count() FROM " + other.get("schema") + ".not_state", rs -> rs.getLong(1)));
        }
    }

    @Test
    void wrongPasswordAndUnreachableServerAreNamedAndThePasswordIsNotShown() {
        Map<String, Object> wrong = new java.util.HashMap<>(settings);
        wrong.put("password", "s3cret-wrong-pw");
        BridgeException auth = assertThrows(BridgeException.class, () -> new BridgeService(json).initialize(wrong));
        assertEquals(ErrorCode.AUTHENTICATION, auth.code(), auth.getMessage());
        assertTrue(!auth.getMessage().contains("s3cret-wrong-pw"), auth.getMessage());

        Map<String, Object> down = new java.util.HashMap<>(settings);
        down.put("host", "127.0.0.1");
        down.put("port", 1);
        down.put("password", "s3cret-wrong-pw");
        down.put("connect_timeout_seconds", 2);
        BridgeException unreachable = assertThrows(BridgeException.class, () -> new BridgeService(json).initialize(down));
        assertEquals(ErrorCode.UNREACHABLE, unreachable.code(), unreachable.getMessage());
        assertTrue(unreachable.getMessage().contains("127.0.0.1:1"), unreachable.getMessage());
        assertTrue(!unreachable.getMessage().contains("s3cret-wrong-pw"), unreachable.getMessage());
    }

    @Test
    void largeStateRoundTrips() throws Exception {
        StringBuilder big = new StringBuilder("{\"rows\":[");
        for (int i = 0; i < 100_000; i++) {
            big.append(i == 0 ? "" : ",").append("{\"id\":").append(i).append(",\"s\":\"line\\nwith 'quotes' and \\\\ \"}");
        }
        StatePart state = obj(big.append("]}").toString());
        bridge.set("big", state, null);
        assertEquals(state, bridge.get("big").partial());
    }
}
