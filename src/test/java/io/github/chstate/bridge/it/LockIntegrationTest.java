package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.config.SettingsParser;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.lock.ClaimLock;
import io.github.chstate.bridge.lock.KeeperLock;
import io.github.chstate.bridge.lock.LeasePolicy;
import io.github.chstate.bridge.lock.LockTables;
import io.github.chstate.bridge.lock.Locks;
import io.github.chstate.bridge.lock.StateLock;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.Tables;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.File;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Both locks, each on a server that has it: claims on {@link ClickHouseEndpoint#settings()}, keeper on the first of
 * {@link ClickHouseEndpoint#keeperServers()} (and, in the stress test, on both, half of the processes on each).
 */
class LockIntegrationTest {
    private static final int PROCESSES = 8;
    private static final int ROUNDS = 20;
    private final ObjectMapper json = Json.mapper();

    /** One schema, on every server the lock kind runs on here. */
    private static List<Map<String, Object>> servers(String lock) {
        List<Map<String, Object>> servers = lock.equals("keeper") ? ClickHouseEndpoint.keeperServers()
                : List.of(ClickHouseEndpoint.settings());
        servers.forEach(s -> s.put("lock", lock));
        return servers;
    }

    private static Map<String, Object> settings(String lock) {
        return servers(lock).get(0);
    }

    /**
     * The counter is kept in the state. Half of the processes (on each server) keep their sets back for a second, the
     * other half write each at once: a holder that kept its last set back writes it as the lock passes, so the next
     * holder, of either kind, reads it.
     */
    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void eightProcessesNeverHoldTheLockAtOnceAndLoseNoIncrement(String lock) throws Exception {
        List<Map<String, Object>> servers = servers(lock);
        for (Map<String, Object> server : servers) {
            server.put("lock_wait_seconds", 600);
            server.put("lock_timeout_seconds", 60);
            try (BridgeService setup = new BridgeService(json)) {
                setup.initialize(server); // creates the tables once, before the race
            }
        }
        Map<String, Object> settings = servers.get(0);
        // Each server has a state table of its own; across servers the exact count is kept in a KeeperMap table.
        String shared = "default.lock_counter_" + UUID.randomUUID().toString().replace("-", "");
        if (lock.equals("keeper")) {
            for (Map<String, Object> server : servers) {
                try (Connection c = ClickHouseEndpoint.jdbc(server); Statement s = c.createStatement()) {
                    s.execute("CREATE TABLE " + shared + " (k String, n UInt64) ENGINE = KeeperMap('/" + shared
                            + "') PRIMARY KEY k");
                }
            }
        }
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        List<Process> workers = new ArrayList<>();
        for (int i = 0; i < PROCESSES; i++) {
            Process p = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    LockStressWorker.class.getName(), "stress:one-id", String.valueOf(ROUNDS),
                    lock.equals("keeper") ? shared : "")
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            Map<String, Object> worker = new HashMap<>(servers.get(i % servers.size()));
            worker.put("write_interval_seconds", (i / servers.size()) % 2 == 0 ? 1 : 0);
            try (OutputStream in = p.getOutputStream()) {
                // the password goes over stdin, not argv
                in.write(json.writeValueAsBytes(worker));
            }
            workers.add(p);
        }
        List<long[]> sections = new ArrayList<>();
        try {
            for (Process p : workers) {
                String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertTrue(p.waitFor(10, TimeUnit.MINUTES));
                assertEquals(0, p.exitValue(), "a worker failed");
                for (String line : out.strip().split("\n")) {
                    String[] parts = line.split(" ");
                    sections.add(new long[] {Long.parseLong(parts[0]), Long.parseLong(parts[1])});
                }
            }
        } finally {
            workers.forEach(Process::destroyForcibly); // after a failure, the others would go on contending
        }
        assertEquals(PROCESSES * ROUNDS, sections.size());
        sections.sort((a, b) -> Long.compare(a[0], b[0]));
        int overlaps = 0;
        for (int i = 1; i < sections.size(); i++) {
            if (sections.get(i)[0] < sections.get(i - 1)[1]) {
                overlaps++;
            }
        }
        assertEquals(0, overlaps, "critical sections overlapped");
        int stored = 0;
        for (Map<String, Object> server : servers) {
            try (BridgeService reader = connected(server)) {
                stored += json.readTree(reader.get("stress:one-id").completed().text()).path("count").asInt();
            }
        }
        assertEquals(PROCESSES * ROUNDS, stored, "increments were lost");
        if (lock.equals("keeper")) {
            try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT n FROM " + shared)) {
                assertTrue(rs.next());
                assertEquals(PROCESSES * ROUNDS, rs.getLong(1), "increments of the shared counter were lost");
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aLockStillHeldWhenTheBridgeClosesIsFreedAfterItsPendingStateIsWritten(String lock) throws Exception {
        // Closing is what EOF on stdin does: the Meltano that held the lock is gone. (SIGKILL: see below.)
        Map<String, Object> settings = settings(lock);
        settings.put("lock_timeout_seconds", 60);
        settings.put("lock_wait_seconds", 10);
        BridgeService gone = connected(settings);
        gone.acquireLock("gone:holder", 0.05);
        gone.set("gone:holder", null, StatePart.of("{\"n\":1}"));
        gone.set("gone:holder", null, StatePart.of("{\"n\":2}")); // pending
        gone.close();
        try (BridgeService next = connected(withWait(settings, 0.5))) { // a lock not freed would be held 60 s
            String token = next.acquireLock("gone:holder", 0.05);
            assertEquals("{\"n\":2}", next.get("gone:holder").completed().text());
            next.releaseLock(token);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aWaiterGivesUpWithLockNotAcquiredAndTheHolderKeepsIt(String lock) {
        Map<String, Object> settings = settings(lock);
        settings.put("lock_timeout_seconds", 60);
        settings.put("lock_wait_seconds", 0.5);
        try (BridgeService holder = new BridgeService(json); BridgeService waiter = new BridgeService(json)) {
            holder.initialize(settings);
            waiter.initialize(settings);
            String token = holder.acquireLock("busy", 0.05);
            BridgeException e = assertThrows(BridgeException.class, () -> waiter.acquireLock("busy", 0.1));
            assertEquals(ErrorCode.LOCK_NOT_ACQUIRED, e.code());
            assertTrue(e.getMessage().contains("busy"), e.getMessage());
            // other ids are independent
            waiter.releaseLock(waiter.acquireLock("other", 0.05));
            holder.releaseLock(token);
            waiter.releaseLock(waiter.acquireLock("busy", 0.05));
            BridgeException twice = assertThrows(BridgeException.class, () -> holder.releaseLock(token));
            assertEquals(ErrorCode.INVALID_PARAMS, twice.code());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aReleasedLockIsTakenBackWhenNobodyWaitsAndReallyReleasedSoonAfter(String lock) throws Exception {
        Map<String, Object> settings = settings(lock); // one schema for both
        settings.put("lock_timeout_seconds", 60);
        try (BridgeService bridge = connected(settings); BridgeService other = connected(withWait(settings, 10))) {
            String token = bridge.acquireLock("kept", 0.05);
            bridge.releaseLock(token);
            assertEquals(token, bridge.acquireLock("kept", 0.05), "a new claim although nobody waited");
            bridge.releaseLock(token);
            // Freed KEPT_AFTER_RELEASE later by the bridge's timer: a lock kept for good would be held for 60 s.
            String others = other.acquireLock("kept", 0.05);
            assertNotEquals(token, others);
            other.releaseLock(others);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aWaiterGoesFirstWhenTheHolderTakesTheLockAgainAfterCheckingTheQueue(String lock) throws Exception {
        Map<String, Object> settings = settings(lock); // one schema for both
        try (BridgeService holder = connected(settings); BridgeService waiter = connected(settings)) {
            String first = holder.acquireLock("queue", 0.05);
            long firstAt = System.nanoTime();
            CompletableFuture<Long> waiterDone = CompletableFuture.supplyAsync(() -> {
                String token = waiter.acquireLock("queue", 0.05);
                long releasedAt = System.nanoTime();
                waiter.releaseLock(token);
                return releasedAt;
            });
            LockWaiters.awaitWaiter(settings, lock, "queue");
            // Past CHECK_QUEUE_AFTER the holder asks the table again before it takes its own lock back.
            LockWaiters.until(firstAt + LeasePolicy.CHECK_QUEUE_AFTER.toNanos());
            holder.releaseLock(first);
            String second = holder.acquireLock("queue", 0.05);
            long holderAgainAt = System.nanoTime();
            assertNotEquals(first, second, "the holder took its claim back over a waiter");
            assertTrue(holderAgainAt > waiterDone.get(20, TimeUnit.SECONDS), "the waiter did not go first");
            holder.releaseLock(second);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void closingWritesTheReleasesItKept(String lock) {
        Map<String, Object> settings = settings(lock);
        settings.put("lock_timeout_seconds", 60);
        try (BridgeService other = connected(withWait(settings, 0.5))) { // a lock not freed would be held 60 s
            BridgeService bridge = connected(settings);
            bridge.releaseLock(bridge.acquireLock("closed", 0.05));
            bridge.close();
            String token = other.acquireLock("closed", 0.05);
            other.releaseLock(token);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aStaleHoldersLateReleaseLeavesTheNewHoldersLockAlone(String lock) {
        Map<String, Object> settings = settings(lock);
        settings.put("lock_timeout_seconds", 1);
        settings.put("lock_wait_seconds", 10);
        try (BridgeService stale = connected(settings); BridgeService next = connected(settings);
             BridgeService third = connected(settings)) {
            String old = stale.acquireLock("aba", 0.05);
            String current = next.acquireLock("aba", 0.05); // after the old one went stale
            assertNotEquals(old, current);
            stale.releaseLock(old); // wakes up late
            stale.close(); // and frees what it kept, now
            // It judges staleness by its own lock_timeout_seconds: with 60 s, only a freed lock would let it in.
            Map<String, Object> waiterSettings = new java.util.HashMap<>(settings);
            waiterSettings.put("lock_timeout_seconds", 60);
            waiterSettings.put("lock_wait_seconds", 0.5);
            try (BridgeService waiter = connected(waiterSettings)) {
                BridgeException e = assertThrows(BridgeException.class, () -> waiter.acquireLock("aba", 0.1));
                assertEquals(ErrorCode.LOCK_NOT_ACQUIRED, e.code(), "the late release freed the new holder's lock");
            }
            next.releaseLock(current);
            next.close();
            third.releaseLock(third.acquireLock("aba", 0.05));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aKilledHoldersLockIsTakenOverAfterTheTimeoutAndNotBefore(String lock) throws Exception {
        Map<String, Object> settings = settings(lock);
        settings.put("lock_timeout_seconds", 2);
        settings.put("lock_wait_seconds", 20);
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        Process holder = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                LockStressWorker.class.getName(), "killed:holder", "hold")
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try (OutputStream in = holder.getOutputStream()) {
            in.write(json.writeValueAsBytes(settings));
        }
        String line = new java.io.BufferedReader(new java.io.InputStreamReader(holder.getInputStream())).readLine();
        long heldSince = Long.parseLong(line.trim()); // when it asked: no later than the lock's time in the table
        holder.destroyForcibly().waitFor(); // SIGKILL
        try (BridgeService next = connected(settings)) {
            String token = next.acquireLock("killed:holder", 0.05);
            long waitedMs = (System.nanoTime() - heldSince) / 1_000_000;
            assertTrue(waitedMs >= 2000, "took over a live lock " + waitedMs + " ms after it was taken");
            next.releaseLock(token);
        }
    }

    @Test
    void autoPicksKeeperWhereTheServerHasKeeperMapAndClaimsWhereNot() throws Exception {
        Map<String, Object> keeper = ClickHouseEndpoint.keeperServers().get(0);
        assertEquals(List.of("state_keeper_lock"), lockTablesAfterALock(keeper));
        Map<String, Object> plain = ClickHouseEndpoint.settings();
        assertEquals(List.of(ClickHouseEndpoint.hasKeeperMap(plain) ? "state_keeper_lock" : "state_claims"),
                lockTablesAfterALock(plain));
    }

    @Test
    void autoKeepsToTheClaimsTableOfASingleServersSchemaEvenWhereTheServerHasKeeperMap() throws Exception {
        // As after KeeperMap was added to a server whose schema auto had put on claims: every bridge of the schema
        // must take the same lock, and none probes for KeeperMap again.
        Map<String, Object> keeper = ClickHouseEndpoint.keeperServers().get(0);
        keeper.put("schema", "it_auto_" + UUID.randomUUID().toString().replace("-", "").substring(0, 10));
        keeper.put("lock", "claims");
        try (BridgeService bridge = new BridgeService(json)) {
            bridge.initialize(keeper);
            bridge.releaseLock(bridge.acquireLock("auto", 0.05));
        }
        keeper.remove("lock");
        try (BridgeService bridge = new BridgeService(json)) {
            assertEquals("claims", bridge.initialize(keeper).get("lock"));
            bridge.releaseLock(bridge.acquireLock("auto", 0.05));
        }
        assertEquals(List.of("state_claims"), lockTables(keeper));
    }

    /** The lock is opened by the first call that needs it: which lock table is there after one lock on a new schema. */
    private List<String> lockTablesAfterALock(Map<String, Object> settings) throws Exception {
        settings.put("schema", "it_auto_" + UUID.randomUUID().toString().replace("-", "").substring(0, 10));
        try (BridgeService bridge = new BridgeService(json)) {
            assertEquals("auto", bridge.initialize(settings).get("lock")); // not decided yet: no lock table
            bridge.releaseLock(bridge.acquireLock("auto", 0.05));
        }
        return lockTables(settings);
    }

    private static List<String> lockTables(Map<String, Object> settings) throws Exception {
        List<String> tables = new ArrayList<>();
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT name FROM system.tables WHERE database = '" + settings.get("schema")
                     + "' AND name IN ('state_claims', 'state_keeper_lock') ORDER BY name")) {
            while (rs.next()) {
                tables.add(rs.getString(1));
            }
        }
        return tables;
    }

    @Test
    void autoRefusesReplicatedTablesWithoutKeeperMapAndSaysWhatToDo() throws Exception {
        Map<String, Object> plain = ClickHouseEndpoint.settings();
        Settings parsed = SettingsParser.parse(plain);
        try (ClickHouse ch = new ClickHouse(parsed)) {
            Tables tables = new Tables(parsed);
            LockTables.Found found = tables.ensure(ch).locks();
            // As on a Replicated or Shared state table; those tables themselves cannot run on chDB.
            boolean replicated = true;
            if (ClickHouseEndpoint.hasKeeperMap(plain)) {
                try (StateLock lock = Locks.open(ch, tables.locks(), found, replicated, parsed)) {
                    assertTrue(lock instanceof KeeperLock);
                }
                return;
            }
            BridgeException e = assertThrows(BridgeException.class, () -> Locks.open(ch, tables.locks(), found, replicated, parsed));
            assertEquals(ErrorCode.CONFIGURATION, e.code());
            assertTrue(e.getMessage().contains("keeper_map_path_prefix") && e.getMessage().contains("'claims'"),
                    e.getMessage());
            try (StateLock lock = Locks.open(ch, tables.locks(), found, replicated, parsed.withLock(Settings.LockKind.CLAIMS))) {
                assertTrue(lock instanceof ClaimLock, "lock: claims is taken knowingly, with a warning");
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aKeptLockTooOldToTakeBackIsTakenAfreshWithoutWaiting(String lock) throws Exception {
        Map<String, Object> settings = settings(lock);
        settings.put("lock_timeout_seconds", 1); // a kept lock is taken back only within 0.5 s of being taken
        settings.put("lock_wait_seconds", 0.5); // with retry_seconds of an hour: any wait for a retry fails at once
        try (BridgeService bridge = connected(settings)) {
            String first = bridge.acquireLock("aged", 0.05);
            LockWaiters.until(System.nanoTime() + Duration.ofMillis(600).toNanos());
            bridge.releaseLock(first); // kept for 250 ms, but already too old to take back
            String second = bridge.acquireLock("aged", 3600.0);
            assertNotEquals(first, second);
            bridge.releaseLock(second);
        }
    }

    private BridgeService connected(Map<String, Object> settings) {
        BridgeService bridge = new BridgeService(json);
        bridge.initialize(settings);
        return bridge;
    }

    /** The same settings, with another lock_wait_seconds: how long its acquire waits before it fails. */
    private static Map<String, Object> withWait(Map<String, Object> settings, double seconds) {
        Map<String, Object> copy = new java.util.HashMap<>(settings);
        copy.put("lock_wait_seconds", seconds);
        return copy;
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void anUncontendedLockNeedsNoWaiting(String lock) {
        Map<String, Object> settings = settings(lock);
        try (BridgeService bridge = new BridgeService(json)) {
            bridge.initialize(settings);
            // retry_seconds of an hour, more than lock_wait_seconds: any wait at all fails the acquire
            for (int i = 0; i < 20; i++) {
                bridge.releaseLock(bridge.acquireLock("free", 3600.0));
            }
        }
    }
}
