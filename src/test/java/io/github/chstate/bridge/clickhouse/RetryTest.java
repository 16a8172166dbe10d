package io.github.chstate.bridge.clickhouse;

import io.github.chstate.bridge.clock.TestClock;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.junit.jupiter.api.Test;

import java.net.ConnectException;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The retry policy on a clock the test drives (time moves only when the code under test pauses): a minute's budget is
 * spent in no time. */
class RetryTest {
    private static final Function<Exception, BridgeException> TRANSLATE =
            e -> new BridgeException(ErrorCode.CLICKHOUSE, "Failed: " + e.getMessage() + ".");

    private final TestClock clock = new TestClock();
    private final Retry retry = new Retry(Duration.ofSeconds(60), "http://ch:8123", clock);
    private final AtomicInteger tries = new AtomicInteger();

    private <T> T failing(Exception e) throws Exception {
        tries.incrementAndGet();
        throw e;
    }

    @Test
    void aPassingFailureIsTriedWithGrowingPausesUntilTheBudgetEndsAndTheErrorSaysSo() {
        assertEquals("ok", retry.run(() -> "ok", TRANSLATE)); // the server was reached once
        BridgeException e = assertThrows(BridgeException.class,
                () -> retry.run(() -> failing(new SocketTimeoutException("Read timed out")), TRANSLATE));
        // Pauses 0.1, 0.2, 0.4, 0.8, 1.6, 3.2 s, then 5 s each: after 16 of them (56.3 s) less than 5 s is left.
        assertEquals(17, tries.get());
        assertEquals(56_300_000_000L, clock.nanos());
        assertEquals("Failed: Read timed out. Tried 17 times in 56 s (retry_budget_seconds).", e.getMessage());
        assertEquals(ErrorCode.CLICKHOUSE, e.code());
    }

    @Test
    void aFailureThatDoesNotPassIsNotTriedAgain() {
        BridgeException e = assertThrows(BridgeException.class,
                () -> retry.run(() -> failing(new IllegalStateException("Code: 60. Unknown table")), TRANSLATE));
        assertEquals(1, tries.get());
        assertEquals(0, clock.nanos());
        assertEquals("Failed: Code: 60. Unknown table.", e.getMessage());
    }

    @Test
    void aServerNeverReachedIsNotWaitedFor() {
        assertThrows(BridgeException.class, () -> retry.run(() -> failing(new ConnectException("refused")), TRANSLATE));
        assertEquals(1, tries.get());
        assertEquals(0, clock.nanos());
    }

    @Test
    void statementsInsideABoundedWaitStopAtItsEndNotAtABudgetOfTheirOwn() {
        retry.run(() -> "ok", TRANSLATE);
        BridgeException e = assertThrows(BridgeException.class, () -> Retry.until(clock.nanos() + 2_000_000_000L,
                "lock_wait_seconds", () -> retry.run(() -> failing(new SocketTimeoutException("slow")), TRANSLATE)));
        // 0.1 + 0.2 + 0.4 + 0.8 = 1.5 s: the next pause (1.6 s) would end after the wait's 2 s.
        assertEquals(5, tries.get());
        assertTrue(e.getMessage().endsWith("Tried 5 times in 1 s (lock_wait_seconds)."), e.getMessage());
    }
}
