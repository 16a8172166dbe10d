package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.store.ClaimLock;
import org.junit.jupiter.api.Test;

import java.io.File;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LockIntegrationTest {
    private static final int PROCESSES = 8;
    private static final int ROUNDS = 100;
    private final ObjectMapper json = Json.mapper();

    @Test
    void eightProcessesNeverHoldTheLockAtOnceAndLoseNoIncrement() throws Exception {
        Map<String, Object> settings = ClickHouseEndpoint.settings();
        settings.put("lock_wait_seconds", 600);
        settings.put("lock_timeout_seconds", 60);
        try (BridgeService setup = new BridgeService(json)) {
            setup.initialize(settings); // creates the tables once, before the race
        }
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        List<Process> workers = new ArrayList<>();
        for (int i = 0; i < PROCESSES; i++) {
            Process p = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    LockStressWorker.class.getName(), "stress:one-id", String.valueOf(ROUNDS))
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            try (OutputStream in = p.getOutputStream()) {
                in.write(json.writeValueAsBytes(settings)); // the password goes over stdin, not argv
            }
            workers.add(p);
        }
        List<long[]> sections = new ArrayList<>();
        for (Process p : workers) {
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(10, TimeUnit.MINUTES));
            assertEquals(0, p.exitValue(), "a worker failed");
            for (String line : out.strip().split("\n")) {
                String[] parts = line.split(" ");
                sections.add(new long[] {Long.parseLong(parts[0]), Long.parseLong(parts[1])});
            }
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
        try (BridgeService reader = connected(settings)) {
            assertEquals(PROCESSES * ROUNDS, reader.get("stress:one-id").completed().path("count").asInt(),
                    "increments were lost");
        }
    }

    @Test
    void aDeadHoldersLockIsTakenOverAfterTheTimeout() {
        Map<String, Object> settings = ClickHouseEndpoint.settings();
        settings.put("lock_timeout_seconds", 1);
        settings.put("lock_wait_seconds", 10);
        BridgeService dead = new BridgeService(json);
        dead.initialize(settings);
        String first = dead.acquireLock("dead:holder", 0.05);
        dead.close(); // never releases, like a killed process

        try (BridgeService next = new BridgeService(json)) {
            next.initialize(settings);
            long start = System.nanoTime();
            String second = next.acquireLock("dead:holder", 0.05);
            long waitedMs = (System.nanoTime() - start) / 1_000_000;
            assertNotEquals(first, second);
            assertTrue(waitedMs >= 500, "took over a live lock after " + waitedMs + " ms");
            next.releaseLock(second);
        }
    }

    @Test
    void aWaiterGivesUpWithLockNotAcquiredAndTheHolderKeepsIt() {
        Map<String, Object> settings = ClickHouseEndpoint.settings();
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

    @Test
    void aReleasedLockIsTakenBackWhenNobodyWaitsAndReallyReleasedSoonAfter() throws Exception {
        Map<String, Object> settings = ClickHouseEndpoint.settings(); // one schema for both
        try (BridgeService bridge = connected(settings); BridgeService other = connected(settings)) {
            String token = bridge.acquireLock("kept", 0.05);
            bridge.releaseLock(token);
            assertEquals(token, bridge.acquireLock("kept", 0.05), "a new claim although nobody waited");
            bridge.releaseLock(token);
            Thread.sleep(ClaimLock.KEPT_AFTER_RELEASE.toMillis() + 1000);
            // retry_seconds of an hour: unless the release is in the table by now, this fails at once
            String others = assertTimeoutPreemptively(Duration.ofSeconds(20), () -> other.acquireLock("kept", 3600.0));
            assertNotEquals(token, others);
            other.releaseLock(others);
        }
    }

    @Test
    void aWaiterGoesFirstWhenTheHolderTakesTheLockAgainAfterCheckingTheQueue() throws Exception {
        Map<String, Object> settings = ClickHouseEndpoint.settings(); // one schema for both
        try (BridgeService holder = connected(settings); BridgeService waiter = connected(settings)) {
            String first = holder.acquireLock("queue", 0.05);
            CompletableFuture<Long> waiterDone = CompletableFuture.supplyAsync(() -> {
                String token = waiter.acquireLock("queue", 0.05);
                sleepMillis(300);
                long releasedAt = System.nanoTime();
                waiter.releaseLock(token);
                return releasedAt;
            });
            // By then the waiter's claim is in the table, and the holder asks the table again before taking its own back.
            sleepMillis(ClaimLock.CHECK_QUEUE_AFTER.toMillis() + 500);
            holder.releaseLock(first);
            String second = holder.acquireLock("queue", 0.05);
            long holderAgainAt = System.nanoTime();
            assertNotEquals(first, second, "the holder took its claim back over a waiter");
            assertTrue(holderAgainAt > waiterDone.get(20, TimeUnit.SECONDS), "the waiter did not go first");
            holder.releaseLock(second);
        }
    }

    @Test
    void closingWritesTheReleasesItKept() {
        Map<String, Object> settings = ClickHouseEndpoint.settings();
        try (BridgeService other = connected(settings)) {
            BridgeService bridge = connected(settings);
            bridge.releaseLock(bridge.acquireLock("closed", 0.05));
            bridge.close();
            String token = assertTimeoutPreemptively(Duration.ofSeconds(20), () -> other.acquireLock("closed", 3600.0));
            other.releaseLock(token);
        }
    }

    private BridgeService connected(Map<String, Object> settings) {
        BridgeService bridge = new BridgeService(json);
        bridge.initialize(settings);
        return bridge;
    }

    private static void sleepMillis(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void anUncontendedLockNeedsNoWaiting() {
        Map<String, Object> settings = new HashMap<>(ClickHouseEndpoint.settings());
        try (BridgeService bridge = new BridgeService(json)) {
            bridge.initialize(settings);
            // retry_seconds of an hour: any wait at all would hang this test
            for (int i = 0; i < 20; i++) {
                bridge.releaseLock(bridge.acquireLock("free", 3600.0));
            }
        }
    }
}
