package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StateHistory;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StateSurgery;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Changes to single streams' bookmarks (docs/history.md): previewed unless executed, written as a new version. */
class SurgeryIntegrationTest {
    private final ObjectMapper json = Json.mapper();
    private Map<String, Object> settings;
    private BridgeService bridge;
    private final String id = "dev:surgery-" + UUID.randomUUID();

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

    private void write(int a, int b) {
        bridge.set(id, StatePart.EMPTY, StatePart.of("{\"singer_state\":{\"bookmarks\":{\"a\":{\"replication_key\":"
                + "\"id\",\"replication_key_value\":" + a + ",\"progress_markers\":{\"x\":1}},\"b\":{\"replication_key_"
                + "value\":" + b + "}}}}"));
    }

    private JsonNode bookmarks() throws Exception {
        return json.readTree(bridge.get(id).completed().text()).at("/singer_state/bookmarks");
    }

    private int versions() {
        return bridge.history(id, 1000).size();
    }

    private StateHistory.Surgery change(String action, List<String> streams, String at, JsonNode value, boolean execute,
                                        boolean force) {
        return bridge.changeStreams(id, action, streams, at, value, execute, force);
    }

    @Test
    void aPreviewWritesNothingAndExecuteWritesOneVersionThatChangesOnlyTheStreamNamed() throws Exception {
        write(10, 20);
        StateHistory.Surgery preview = change("reset", List.of("a"), null, null, false, false);
        assertFalse(preview.executed());
        assertNull(preview.version());
        assertEquals(List.of("a"), preview.changes().stream().map(StateSurgery.Change::stream).toList());
        assertEquals(10, preview.changes().get(0).before().path("replication_key_value").asInt());
        assertNull(preview.changes().get(0).after());
        assertEquals(1, versions());
        assertTrue(bookmarks().has("a"));

        StateHistory.Surgery done = change("reset", List.of("a"), null, null, true, false);
        assertTrue(done.executed());
        assertEquals(2, versions());
        assertFalse(bookmarks().has("a"));
        assertEquals(20, bookmarks().path("b").path("replication_key_value").asInt());
        assertEquals(List.of("a"), bridge.diff(id, null).stream().map(StateSurgery.Change::stream).toList());
    }

    @Test
    void aStreamIsRestoredFromAnOlderVersionAndTheOthersStayAsTheyAre() throws Exception {
        write(10, 20);
        long before = bridge.history(id, 1).get(0).version();
        write(99, 30);
        change("restore", List.of("a"), String.valueOf(before), null, true, false);
        assertEquals(10, bookmarks().path("a").path("replication_key_value").asInt());
        assertEquals(30, bookmarks().path("b").path("replication_key_value").asInt());
        assertEquals(3, versions());
    }

    @Test
    void setBookmarkSetsTheValueAndDropsTheProgressMarkers() throws Exception {
        write(10, 20);
        change("set_bookmark", List.of("a"), null, json.readTree("5"), true, false);
        assertEquals(5, bookmarks().path("a").path("replication_key_value").asInt());
        assertEquals("id", bookmarks().path("a").path("replication_key").asText());
        assertFalse(bookmarks().path("a").has("progress_markers"));
        assertEquals(20, bookmarks().path("b").path("replication_key_value").asInt());
    }

    @Test
    void anUnknownStreamListsTheStreamsAndAStateWithoutBookmarksSaysSoAndNothingIsWritten() {
        write(10, 20);
        BridgeException unknown = assertThrows(BridgeException.class,
                () -> change("reset", List.of("c"), null, null, true, false));
        assertEquals(ErrorCode.INVALID_PARAMS, unknown.code());
        assertTrue(unknown.getMessage().contains("has no stream 'c'; its streams: a, b"), unknown.getMessage());
        bridge.set(id, StatePart.EMPTY, StatePart.of("{\"other\":1}"));
        BridgeException notSinger = assertThrows(BridgeException.class,
                () -> change("reset", List.of("a"), null, null, true, false));
        assertTrue(notSinger.getMessage().contains("not a Singer state"), notSinger.getMessage());
        assertEquals(2, versions());
    }

    @Test
    void executingIsRefusedWhileARunHoldsTheIdNamingItAndForceTakesItOver() throws Exception {
        write(10, 20);
        try (BridgeService run = new BridgeService(json)) {
            run.initialize(settings, Map.of("id", "r1", "host", "runner-1", "pid", 4242L, "command",
                    "meltano run tap target", "force", false));
            run.get(id); // a run's first call takes its lease
            BridgeException refused = assertThrows(BridgeException.class,
                    () -> change("reset", List.of("a"), null, null, true, false));
            assertEquals(ErrorCode.RUN_IN_PROGRESS, refused.code());
            assertTrue(refused.getMessage().contains("(host runner-1, pid 4242)"), refused.getMessage());
            assertEquals(1, versions());

            StateHistory.Surgery forced = change("reset", List.of("a"), null, null, true, true);
            assertTrue(forced.warning().contains("runner-1"), forced.warning());
            assertFalse(bookmarks().has("a"));
        }
    }
}
