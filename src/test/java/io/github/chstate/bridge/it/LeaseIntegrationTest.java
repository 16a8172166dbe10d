package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StoredState;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Run leases (docs/lock.md, "Run leases"): a second run is refused at once, {@code --force} takes the id over, and a
 * run that lost its lease writes nothing — checked by the server itself for a write already on its way.
 */
class LeaseIntegrationTest {
    private final ObjectMapper json = Json.mapper();

    /** {@code writeInterval}: 0 (every update written at once) or the default, 1 s (kept back, written later). */
    private static Map<String, Object> settings(String lock, int lockTimeoutSeconds, int writeInterval) {
        Map<String, Object> settings = lock.equals("keeper") ? ClickHouseEndpoint.keeperServers().get(0)
                : ClickHouseEndpoint.settings();
        settings.put("lock", lock);
        settings.put("lock_timeout_seconds", lockTimeoutSeconds);
        settings.put("write_interval_seconds", writeInterval);
        return settings;
    }

    private static Map<String, Object> run(String id, long pid, boolean force) {
        return Map.of("id", id, "host", "runner-" + id, "pid", pid, "command",
                "meltano run " + (force ? "--force " : "") + "tap target", "force", force);
    }

    /** Meltano's update: lock, get, set, release. */
    private static void update(BridgeService bridge, String id, int n) {
        String token = bridge.acquireLock(id, 0.05);
        try {
            bridge.get(id);
            bridge.set(id, null, StatePart.of("{\"n\":" + n + "}"));
        } finally {
            bridge.releaseLock(token);
        }
    }

    private int stored(BridgeService bridge, String id) throws Exception {
        StoredState state = bridge.get(id);
        return state == null ? -1 : json.readTree(state.completed().text()).path("n").asInt();
    }

    private static List<Long> history(Map<String, Object> settings, String id) throws Exception {
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT JSONExtractInt(completed_state, 'n') FROM " + settings.get("schema")
                     + ".state_history WHERE state_id = '" + id + "' ORDER BY updated_at")) {
            List<Long> values = new java.util.ArrayList<>();
            while (rs.next()) {
                values.add(rs.getLong(1));
            }
            return values;
        }
    }

    private static void execute(Map<String, Object> settings, String sql) throws Exception {
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement()) {
            s.execute(sql);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void anImportOfAnIdALiveRunHoldsIsRefusedWholeNamingTheRun(String lock) throws Exception {
        Map<String, Object> settings = settings(lock, 10, 1);
        String held = "import-held-" + UUID.randomUUID();
        String free = "import-free-" + UUID.randomUUID();
        try (BridgeService running = new BridgeService(json); BridgeService importing = new BridgeService(json)) {
            running.initialize(settings, run("a", 4242, false));
            importing.initialize(settings);
            update(running, held, 1);
            BridgeException refused = assertThrows(BridgeException.class, () -> importing.setAll(List.of(
                    new StoredState(free, null, StatePart.of("{\"n\":7}")),
                    new StoredState(held, null, StatePart.of("{\"n\":7}")))));
            assertEquals(ErrorCode.RUN_IN_PROGRESS, refused.code());
            assertTrue(refused.getMessage().contains("Nothing was imported: state id '" + held + "' is held by the run "
                    + "`meltano run tap target` (host runner-a, pid 4242)"), refused.getMessage());
            assertEquals(-1, stored(importing, free));
            update(running, held, 2);
        }
        try (BridgeService importing = new BridgeService(json)) { // the run ended: its lease was freed
            importing.initialize(settings);
            assertEquals(2, importing.setAll(List.of(new StoredState(free, null, StatePart.of("{\"n\":7}")),
                    new StoredState(held, null, StatePart.of("{\"n\":7}")))));
            assertEquals(7, stored(importing, held));
            assertEquals(List.of(1L, 2L, 7L), history(settings, held));
        }
    }

    @ParameterizedTest
    @CsvSource({"claims, 0", "claims, 1", "keeper, 0", "keeper, 1"})
    void aSecondRunIsRefusedAtOnceAndAStateCommandWaitsForTheRunThenNamesIt(String lock, int writeInterval)
            throws Exception {
        Map<String, Object> settings = settings(lock, 10, writeInterval);
        String id = "lease-" + UUID.randomUUID();
        try (BridgeService first = new BridgeService(json); BridgeService second = new BridgeService(json);
             BridgeService command = new BridgeService(json)) {
            first.initialize(settings, run("a", 4242, false));
            second.initialize(settings, run("b", 4343, false));
            Map<String, Object> waitOneSecond = new java.util.HashMap<>(settings);
            waitOneSecond.put("lock_wait_seconds", 1);
            command.initialize(waitOneSecond);

            first.get(id); // the run reads its state first, and so takes the lease
            BridgeException refused = assertThrows(BridgeException.class, () -> second.get(id));
            assertEquals(ErrorCode.RUN_IN_PROGRESS, refused.code());
            assertTrue(refused.getMessage().contains("`meltano run tap target` (host runner-a, pid 4242)")
                    && refused.getMessage().contains("--force"), refused.getMessage());

            update(first, id, 1); // the run's own updates go on under its lease
            update(first, id, 2);
            BridgeException waited = assertThrows(BridgeException.class, () -> command.acquireLock(id, 0.1));
            assertEquals(ErrorCode.LOCK_NOT_ACQUIRED, waited.code());
            assertTrue(waited.getMessage().contains("held by the run `meltano run tap target` (host runner-a"),
                    waited.getMessage());
            assertEquals(List.of(Map.of("state_id", id, "pid", 4242L)), first.runs().stream()
                    .filter(r -> id.equals(r.get("state_id")))
                    .map(r -> Map.of("state_id", r.get("state_id"), "pid", r.get("pid"))).toList());

            first.close(); // the command ended: its lease is freed, and the next run takes it at once
            second.get(id);
            assertEquals(2, stored(second, id));
        }
    }

    /**
     * The run's lease is taken from it in the table while its bridge still counts it as its own (as after a pause
     * longer than lock_timeout_seconds): its next write reaches the server, which drops it, and the run is told.
     */
    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aWriteOfARunWhoseLeaseWasTakenIsDroppedByTheServer(String lock) throws Exception {
        Map<String, Object> settings = settings(lock, 60, 0); // the bridge's own check would not ask for a minute
        String id = "lease-" + UUID.randomUUID();
        try (BridgeService run = new BridgeService(json)) {
            run.initialize(settings, run("a", 4242, false));
            update(run, id, 1);
            takeOver(settings, lock, id);
            BridgeException lost = assertThrows(BridgeException.class, () -> update(run, id, 2));
            assertEquals(ErrorCode.LOCK_LOST, lost.code());
            assertTrue(lost.getMessage().contains("was taken over by the run `meltano run --force tap target` (host "
                    + "elsewhere, pid 99)"), lost.getMessage());
            assertEquals(List.of(1L), history(settings, id));
            assertEquals(ErrorCode.LOCK_LOST, assertThrows(BridgeException.class, () -> update(run, id, 3)).code());
        }
        assertEquals(List.of(1L), history(settings, id));
    }

    /** Another run takes the lease in the table, as a forced run would, while the bridge counts it as its own. */
    private static void takeOver(Map<String, Object> settings, String lock, String id) throws Exception {
        String other = "{\"token\":\"t\",\"run\":\"z\",\"host\":\"elsewhere\",\"pid\":99,\"command\":\"meltano run "
                + "--force tap target\",\"since\":0}";
        String schema = (String) settings.get("schema");
        if (lock.equals("keeper")) {
            execute(settings, "ALTER TABLE " + schema + ".state_keeper_lock UPDATE token = '" + other + "', at = "
                    + "now64(3) WHERE state_id = '" + id + "' SETTINGS keeper_map_strict_mode = 1");
        } else {
            execute(settings, "INSERT INTO " + schema + ".state_claims (state_id, token, kind) SELECT state_id, "
                    + "token, 'release' FROM " + schema + ".state_claims WHERE state_id = '" + id + "' AND kind = "
                    + "'claim' GROUP BY state_id, token");
            execute(settings, "INSERT INTO " + schema + ".state_claims (state_id, token, kind) VALUES ('" + id
                    + "', '" + other + "', 'claim')");
        }
    }

    /**
     * Meltano's clear (lock, delete) by a run whose lease was taken while its bridge still counts it as its own: the
     * server deletes nothing, and the run is told who took it.
     */
    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aDeleteAfterTheLeaseWasTakenDeletesNothing(String lock) throws Exception {
        Map<String, Object> settings = settings(lock, 60, 0);
        String id = "lease-" + UUID.randomUUID();
        try (BridgeService run = new BridgeService(json); BridgeService reader = new BridgeService(json)) {
            run.initialize(settings, run("a", 4242, false));
            update(run, id, 1);
            takeOver(settings, lock, id);
            String token = run.acquireLock(id, 0.05);
            BridgeException lost = assertThrows(BridgeException.class, () -> run.delete(id));
            assertEquals(ErrorCode.LOCK_LOST, lost.code());
            assertTrue(lost.getMessage().contains("(host elsewhere, pid 99)"), lost.getMessage());
            run.releaseLock(token);
            reader.initialize(settings);
            assertEquals(1, stored(reader, id));
        }
    }

    @ParameterizedTest
    @CsvSource({"claims, 0", "claims, 1", "keeper, 0", "keeper, 1"})
    void forceTakesTheIdOverAndTheDisplacedRunWritesNothingAfter(String lock, int writeInterval) throws Exception {
        Map<String, Object> settings = settings(lock, 3, writeInterval);
        String id = "lease-" + UUID.randomUUID();
        try (BridgeService displaced = new BridgeService(json); BridgeService forced = new BridgeService(json)) {
            displaced.initialize(settings, run("a", 4242, false));
            forced.initialize(settings, run("b", 4343, true));
            update(displaced, id, 1);
            assertEquals(1, stored(forced, id)); // takes the lease over, once the displaced run's is stale
            update(forced, id, 10);
            BridgeException lost = assertThrows(BridgeException.class, () -> update(displaced, id, 2));
            assertEquals(ErrorCode.LOCK_LOST, lost.code());
            // Named when the displaced run noticed after the forced one took the row, not in between.
            assertTrue(lost.getMessage().contains("was taken over by"), lost.getMessage());
            assertEquals(List.of(1L, 10L), history(settings, id));
        }
    }
}
