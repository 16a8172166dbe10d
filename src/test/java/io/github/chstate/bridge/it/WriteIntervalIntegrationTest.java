package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
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
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code write_interval_seconds}: under the lock a set waits in the bridge, and is written at most once per interval
 * and always before the lock passes on; counted in the history table, which holds one version per INSERT.
 */
class WriteIntervalIntegrationTest {
    private static final int UPDATES = 300;
    private final ObjectMapper json = Json.mapper();

    private static Map<String, Object> settings(String lock, double writeInterval) {
        Map<String, Object> settings = lock.equals("keeper") ? ClickHouseEndpoint.keeperServers().get(0)
                : ClickHouseEndpoint.settings();
        settings.put("lock", lock);
        settings.put("write_interval_seconds", writeInterval);
        return settings;
    }

    /** Meltano's update: lock, get, set, release. */
    private void update(BridgeService bridge, String id, int n) throws Exception {
        String token = bridge.acquireLock(id, 0.05);
        bridge.get(id);
        bridge.set(id, null, StatePart.of("{\"n\":" + n + "}"));
        bridge.releaseLock(token);
    }

    private int stored(BridgeService bridge, String id) throws Exception {
        StoredState state = bridge.get(id);
        return state == null ? -1 : json.readTree(state.completed().text()).path("n").asInt();
    }

    private static long versions(Map<String, Object> settings, String id) throws Exception {
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT count() FROM " + settings.get("schema") + ".state_history WHERE "
                     + "state_id = '" + id + "'")) {
            assertTrue(rs.next());
            return rs.getLong(1);
        }
    }

    @ParameterizedTest
    @CsvSource({"claims, 1", "keeper, 1", "claims, 0"})
    void aRunOfUpdatesWritesOncePerIntervalAndItsLastStateBeforeTheLockPassesOn(String lock, double interval)
            throws Exception {
        Map<String, Object> settings = settings(lock, interval);
        try (BridgeService run = new BridgeService(json); BridgeService next = new BridgeService(json)) {
            run.initialize(settings);
            next.initialize(settings);
            long start = System.nanoTime();
            for (int n = 1; n <= UPDATES; n++) {
                update(run, "run", n);
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            // Another process's first get under the lock sees the last state: it was written before the lock passed.
            String token = next.acquireLock("run", 0.05);
            assertEquals(UPDATES, stored(next, "run"));
            next.releaseLock(token);
            long versions = versions(settings, "run");
            if (interval == 0) {
                assertEquals(UPDATES, versions, "every set is an INSERT");
            } else {
                assertTrue(versions <= seconds / interval + 2, versions + " INSERTs in " + seconds + " s");
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aWaiterTakesOverFromAHolderThatKeepsWritingAndLosesNoIncrement(String lock) throws Exception {
        Map<String, Object> settings = settings(lock, 1);
        settings.put("lock_timeout_seconds", 60);
        try (BridgeService holder = new BridgeService(json); BridgeService waiter = new BridgeService(json)) {
            holder.initialize(settings);
            waiter.initialize(settings);
            update(holder, "counter", 0);
            java.util.concurrent.atomic.AtomicInteger held = new java.util.concurrent.atomic.AtomicInteger();
            CompletableFuture<Void> holding = CompletableFuture.runAsync(() -> {
                try {
                    for (int i = 0; i < 200; i++) {
                        increment(holder, "counter");
                        held.incrementAndGet();
                    }
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            while (held.get() < 20 && !holding.isDone()) { // the holder well into its run, its latest states pending
                Thread.sleep(5);
            }
            for (int i = 0; i < 5; i++) {
                increment(waiter, "counter");
            }
            holding.get(2, TimeUnit.MINUTES);
            holder.flush();
            waiter.flush();
            assertEquals(205, stored(waiter, "counter"));
        }
    }

    private void increment(BridgeService bridge, String id) throws Exception {
        String token = bridge.acquireLock(id, 0.05);
        int n = stored(bridge, id);
        bridge.set(id, null, StatePart.of("{\"n\":" + (n + 1) + "}"));
        bridge.releaseLock(token);
    }

    @ParameterizedTest
    @ValueSource(strings = {"flush", "get_all", "get_state_ids", "unlocked get", "close"})
    void whatIsPendingIsWrittenBeforeCallsThatReadMoreThanTheLockedId(String call) throws Exception {
        Map<String, Object> settings = settings("claims", 60);
        try (BridgeService run = new BridgeService(json); BridgeService reader = new BridgeService(json)) {
            run.initialize(settings);
            reader.initialize(settings);
            String token = run.acquireLock("pending", 0.05);
            run.set("pending", null, StatePart.of("{\"n\":1}")); // the first is written at once
            run.set("pending", null, StatePart.of("{\"n\":2}"));
            assertEquals(2, stored(run, "pending"), "under the lock the bridge answers with what it set");
            assertEquals(1, stored(reader, "pending"), "pending, not written");
            switch (call) {
                case "flush" -> run.flush();
                case "get_all" -> run.getAll(null);
                case "get_state_ids" -> run.getStateIds(null);
                case "unlocked get" -> run.get("other");
                case "close" -> run.close();
                default -> throw new IllegalArgumentException(call);
            }
            assertEquals(2, stored(reader, "pending"));
            if (!call.equals("close")) {
                run.releaseLock(token);
            }
            assertEquals(2, versions(settings, "pending"));
        }
    }
}
