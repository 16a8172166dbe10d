package io.github.chstate.bridge.clock;

import java.time.Duration;

/**
 * The bridge's one source of time, as HikariCP's {@code ClockSource}: a monotonic clock for ages and deadlines, the
 * wall clock for times people read or rows carry, and the pause between tries. {@code ClickHouse} holds it
 * ({@link #SYSTEM}), and everything that measures or waits takes it from there ({@code ClickHouse.clock()}); a test
 * gives its own to the class it drives ({@code RetryTest}). The lock's timer (frees and renewals later) runs on
 * real time.
 */
public interface Clock {
    /** Monotonic nanoseconds, as {@link System#nanoTime}: only differences mean anything. */
    long nanos();

    /** Milliseconds since the epoch. */
    long wallMillis();

    /** Waits {@code pause}. */
    void sleep(Duration pause) throws InterruptedException;

    Clock SYSTEM = new Clock() {
        @Override
        public long nanos() {
            return System.nanoTime();
        }

        @Override
        public long wallMillis() {
            return System.currentTimeMillis();
        }

        @Override
        public void sleep(Duration pause) throws InterruptedException {
            Thread.sleep(pause.toMillis());
        }
    };
}
