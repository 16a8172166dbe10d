package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StateHistory;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StateVersion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The history table, filled by the server's materialized view, and restore under the lock. */
class HistoryIntegrationTest {
    private final ObjectMapper json = Json.mapper();
    private Map<String, Object> settings;
    private BridgeService bridge;

    @BeforeEach
    void connect() {
        settings = ClickHouseEndpoint.settings();
        settings.put("lock", "claims");
        bridge = new BridgeService(json);
        bridge.initialize(settings);
    }

    @AfterEach
    void close() {
        bridge.close();
    }

    private static StatePart bookmarks(String stream, int value, String other) {
        return StatePart.of("{\"singer_state\":{\"bookmarks\":{\"" + stream + "\":{\"id\":" + value + "},\"other\":{\"v\":\""
                + other + "\"}}}}");
    }

    @Test
    void fiftyWritesComeBackNewestFirstWithSizesAndWhatChanged() {
        String id = "dev:it's \"ü\" \\ 50%_*";
        for (int i = 1; i <= 50; i++) {
            bridge.set(id, i % 10 == 0 ? StatePart.EMPTY : StatePart.of("{\"singer_state\":{\"bookmarks\":{\"p\":" + i + "}}}"),
                    bookmarks("rows", i, i <= 25 ? "early" : "late"));
        }
        List<StateVersion> all = bridge.history(id, 100);
        assertEquals(50, all.size());
        for (int i = 0; i < 49; i++) {
            assertTrue(all.get(i).version() > all.get(i + 1).version(), "not newest first at " + i);
        }
        StateVersion newest = all.get(0); // write 50: no partial part
        assertTrue(newest.complete());
        assertEquals(bookmarks("rows", 50, "late").text().length(), newest.size());
        assertEquals(List.of("p", "rows"), newest.changed()); // p went away with the partial part, rows moved on
        assertEquals(List.of("other", "p", "rows"), all.get(24).changed()); // write 26: other turned late
        assertFalse(all.get(1).complete());
        assertEquals(List.of("other", "p", "rows"), all.get(49).changed()); // the first: everything is new
        assertEquals(10, bridge.history(id, 10).size());
        assertEquals(all.get(9), bridge.history(id, 10).get(9)); // its changes compare with the one before too
    }

    @Test
    void aWriteStoredTwiceIsOneVersion() throws Exception {
        // Two tries of one INSERT that ran at the same time both pass its version check (neither sees the other's row)
        bridge.set("twice", StatePart.EMPTY, bookmarks("rows", 1, "a"));
        long first = bridge.history("twice", 1).get(0).version();
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement()) {
            for (int copy = 0; copy < 2; copy++) {
                s.execute("INSERT INTO `" + settings.get("schema") + "`.state VALUES ('twice', NULL, "
                        + "'{\"singer_state\":{\"bookmarks\":{\"rows\":{\"id\":2}}}}', fromUnixTimestamp64Milli("
                        + (first + 1) + "))");
            }
        }
        List<StateVersion> versions = bridge.history("twice", 10);
        assertEquals(List.of(first + 1, first), versions.stream().map(StateVersion::version).toList());
        assertEquals(List.of("other", "rows"), versions.get(0).changed());
    }

    @Test
    void restoreWritesAnOldVersionBackAsANewOneUnderTheLockAndKeepsEveryVersion() throws Exception {
        bridge.set("r", StatePart.EMPTY, bookmarks("rows", 1, "good"));
        long good = bridge.history("r", 1).get(0).version();
        bridge.set("r", StatePart.EMPTY, bookmarks("rows", 2, "bad"));
        try (BridgeService writer = new BridgeService(json)) {
            writer.initialize(settings);
            String held = writer.acquireLock("r", 0.05); // a concurrent writer in the middle of its update
            CompletableFuture<StateHistory.Surgery> restore = CompletableFuture.supplyAsync(
                    () -> restore(bridge, "r", Long.toString(good)));
            LockWaiters.awaitWaiter(settings, "claims", "r");
            assertFalse(restore.isDone(), "restore did not wait for the lock");
            writer.set("r", StatePart.EMPTY, bookmarks("rows", 3, "writer"));
            writer.releaseLock(held);
            StateHistory.Surgery restored = restore.get(30, TimeUnit.SECONDS);
            assertTrue(restored.previous().version() > good); // the writer's version, what an undo goes back to
            assertTrue(restored.version().version() > restored.previous().version());
        }
        assertEquals(bookmarks("rows", 1, "good"), bridge.get("r").completed());
        assertEquals(4, bridge.history("r", 100).size()); // good, bad, writer, and good again
    }

    @Test
    void restoreByTimeTakesTheNewestVersionAtOrBeforeItAndSaysWhenThereIsNone() throws Exception {
        bridge.set("t", StatePart.EMPTY, bookmarks("rows", 1, "a"));
        StateVersion first = bridge.history("t", 1).get(0);
        bridge.set("t", StatePart.EMPTY, bookmarks("rows", 2, "b"));
        restore(bridge, "t", first.time()); // the ISO time shown in the history
        assertEquals(bookmarks("rows", 1, "a"), bridge.get("t").completed());
        BridgeException none = assertThrows(BridgeException.class, () -> restore(bridge, "t", "2001-01-01 00:00:00"));
        assertEquals(ErrorCode.INVALID_PARAMS, none.code());
        assertTrue(none.getMessage().contains("no version at or before 2001-01-01T00:00:00.000Z"), none.getMessage());
        BridgeException bad = assertThrows(BridgeException.class, () -> restore(bridge, "t", "yesterday"));
        assertTrue(bad.getMessage().contains("'at' must be a version"), bad.getMessage());
    }

    @Test
    void aStateClearedByMeltanoKeepsItsHistoryAndCanBeRestored() {
        bridge.set("gone", StatePart.EMPTY, bookmarks("rows", 7, "x"));
        bridge.delete("gone");
        assertNull(bridge.get("gone"));
        List<StateVersion> kept = bridge.history("gone", 10);
        assertEquals(1, kept.size());
        assertTrue(assertThrows(BridgeException.class, () -> bridge.changeStreams("gone", "reset", List.of("rows"), null,
                null, true, false)).getMessage().contains("cleared state comes back whole"));
        assertNull(restore(bridge, "gone", Long.toString(kept.get(0).version())).previous()); // its undo is a clear
        assertEquals(bookmarks("rows", 7, "x"), bridge.get("gone").completed());
    }

    @Test
    void nextToATableTheUpstreamAddOnCreatedHistoryStartsFromTheStatesItHolds() throws Exception {
        Map<String, Object> upstream = ClickHouseEndpoint.settings();
        String schema = (String) upstream.get("schema");
        try (Connection c = ClickHouseEndpoint.jdbc(upstream); Statement s = c.createStatement()) {
            s.execute("CREATE DATABASE " + schema);
            s.execute("CREATE TABLE " + schema + ".state (state_id String, partial_state Nullable(String), "
                    + "completed_state Nullable(String), updated_at DateTime64(3) DEFAULT now64(3)) "
                    + "ENGINE = ReplacingMergeTree(updated_at) ORDER BY state_id");
            s.execute("INSERT INTO " + schema + ".state (state_id, partial_state, completed_state) VALUES "
                    + "('dev:old', NULL, '{\"singer_state\": {\"bookmarks\": {\"t\": {\"id\": 7}}}}')");
        }
        try (BridgeService added = new BridgeService(json)) {
            added.initialize(upstream);
            List<StateVersion> seeded = added.history("dev:old", 10);
            assertEquals(1, seeded.size());
            assertEquals(List.of("t"), seeded.get(0).changed());
            added.set("dev:old", StatePart.EMPTY, bookmarks("t", 8, "x"));
            assertEquals(2, added.history("dev:old", 10).size());
            added.initialize(upstream); // again, as every command does: nothing seeded twice
            assertEquals(2, added.history("dev:old", 10).size());
        }
    }

    @Test
    void historyOffDropsTheViewKeepsTheTableAndSaysSo() throws Exception {
        bridge.set("off", StatePart.EMPTY, bookmarks("rows", 1, "x"));
        Map<String, Object> off = new HashMap<>(settings);
        off.put("history_days", 0);
        try (BridgeService without = new BridgeService(json)) {
            without.initialize(off);
            without.set("off", StatePart.EMPTY, bookmarks("rows", 2, "x"));
            BridgeException e = assertThrows(BridgeException.class, () -> without.history("off", 5));
            assertTrue(e.getMessage().contains("history_days"), e.getMessage());
        }
        assertEquals(1, bridge.history("off", 5).size()); // kept, and the write without history is not in it
        Map<String, Object> week = new HashMap<>(settings);
        week.put("history_days", 7);
        try (BridgeService again = new BridgeService(json)) {
            again.initialize(week); // history back on, with another TTL: changed in place
            again.set("off", StatePart.EMPTY, bookmarks("rows", 3, "x"));
            assertEquals(2, again.history("off", 5).size());
        }
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT create_table_query FROM system.tables WHERE database = '"
                     + settings.get("schema") + "' AND name = 'state_history'")) {
            assertTrue(rs.next());
            assertTrue(rs.getString(1).contains("toIntervalDay(7)"), rs.getString(1));
        }
    }

    /** The whole state as it was at {@code at}, written back as a new version (the CLI's restore --execute). */
    private static StateHistory.Surgery restore(BridgeService bridge, String stateId, String at) {
        return bridge.changeStreams(stateId, "restore", List.of(), at, null, true, false);
    }
}
