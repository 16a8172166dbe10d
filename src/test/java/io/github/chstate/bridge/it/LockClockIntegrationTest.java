package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clock.TestClock;
import io.github.chstate.bridge.lock.LeasePolicy;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StatePart;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The lock's background work runs on the clock the bridge is given, not on real time: a bridge on a {@link TestClock}
 * (a real server) frees a kept lock, and renews a run lease, exactly when the test moves its clock that far.
 */
class LockClockIntegrationTest {
    private static final Duration STALE_AFTER = Duration.ofSeconds(600);
    private final ObjectMapper json = Json.mapper();
    private final TestClock clock = new TestClock();

    private static Map<String, Object> settings(String lock) {
        Map<String, Object> settings = lock.equals("keeper") ? ClickHouseEndpoint.keeperServers().get(0)
                : ClickHouseEndpoint.settings();
        settings.put("lock", lock);
        settings.put("lock_timeout_seconds", STALE_AFTER.toSeconds());
        return settings;
    }

    /** Whether another bridge (on real time) gets the lock within lock_wait_seconds. */
    private boolean freeFor(BridgeService other, String id) {
        try {
            other.releaseLock(other.acquireLock(id, 0.05));
            return true;
        } catch (RuntimeException e) {
            return false;
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aReleasedLockIsKeptUntilTheClockHasMovedOnAndThenFreed(String lock) {
        Map<String, Object> settings = settings(lock);
        settings.put("lock_wait_seconds", 1); // longer than KEPT_AFTER_RELEASE: a timer on real time would free it
        String id = "clock-kept-" + UUID.randomUUID();
        try (BridgeService bridge = new BridgeService(json, clock); BridgeService other = new BridgeService(json)) {
            bridge.initialize(settings);
            other.initialize(settings);
            bridge.releaseLock(bridge.acquireLock(id, 0.05));
            clock.advance(LeasePolicy.KEPT_AFTER_RELEASE.minusMillis(1));
            assertTrue(!freeFor(other, id), "freed before the clock reached the kept time");
            clock.advance(Duration.ofMillis(1));
            assertTrue(freeFor(other, id), "still kept after the clock passed the kept time");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"claims", "keeper"})
    void aRunLeaseIsRenewedWhenTheClockSaysSo(String lock) throws Exception {
        Map<String, Object> settings = settings(lock);
        String id = "clock-lease-" + UUID.randomUUID();
        Duration renewEvery = new LeasePolicy(STALE_AFTER, Duration.ofSeconds(30)).renewEvery();
        try (BridgeService bridge = new BridgeService(json, clock)) {
            bridge.initialize(settings, Map.of("id", "clock-run", "host", "runner", "pid", 7, "command",
                    "meltano run tap target", "force", false));
            String token = bridge.acquireLock(id, 0.05);
            bridge.set(id, null, StatePart.of("{\"n\":1}"));
            bridge.releaseLock(token);
            double before = renewedAgoAfterRealTime(bridge, id, 0.5);
            // The renewal is due renewEvery after the lease was last shown this bridge's, which is when the statement
            // showing it was sent less the row's age then (milliseconds): a second of margin either side.
            clock.advance(renewEvery.minusSeconds(1));
            assertTrue(renewedAgo(bridge, id) >= before, "renewed before the clock said so");
            clock.advance(Duration.ofSeconds(2));
            assertTrue(renewedAgo(bridge, id) < before, "not renewed when the clock said so");
        }
    }

    /** Waits (real time, on the server's clock) until the lease was last renewed at least {@code seconds} ago. */
    private double renewedAgoAfterRealTime(BridgeService bridge, String id, double seconds) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        double ago;
        while ((ago = renewedAgo(bridge, id)) < seconds) {
            assertTrue(System.nanoTime() < deadline, "the lease's age did not reach " + seconds + " s in 60 s");
            Thread.sleep(50);
        }
        return ago;
    }

    private static double renewedAgo(BridgeService bridge, String id) {
        List<Map<String, Object>> runs = bridge.runs().stream().filter(r -> id.equals(r.get("state_id"))).toList();
        assertEquals(1, runs.size(), runs.toString());
        return ((Number) runs.get(0).get("renewed_seconds_ago")).doubleValue();
    }
}
