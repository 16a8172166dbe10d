package io.github.chstate.bridge.clock;

import java.time.Duration;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * The bridge's one source of time, as HikariCP's {@code ClockSource}: a monotonic clock for ages and deadlines, the
 * wall clock for times people read or rows carry, the pause between tries, and the timers of background work (a
 * lock's renewals, frees and kept-back writes). {@code BridgeService} gives it to {@code ClickHouse} ({@link #SYSTEM}
 * in the bridge), and everything that measures, waits or schedules takes it from there ({@code ClickHouse.clock()});
 * a test gives its own, whose time moves only when the test moves it ({@code TestClock}).
 */
public interface Clock {
    /** Monotonic nanoseconds, as {@link System#nanoTime}: only differences mean anything. */
    long nanos();

    /** Milliseconds since the epoch. */
    long wallMillis();

    /** Waits {@code pause}. */
    void sleep(Duration pause) throws InterruptedException;

    /** A timer of one background thread named {@code name}, on this clock's time. */
    Timer timer(String name);

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

        @Override
        public Timer timer(String name) {
            ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, r -> {
                Thread t = new Thread(r, name);
                t.setDaemon(true);
                return t;
            });
            executor.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
            return new Timer() {
                @Override
                public void schedule(Runnable task, long delayNanos) {
                    try {
                        executor.schedule(task, Math.max(0, delayNanos), TimeUnit.NANOSECONDS);
                    } catch (RejectedExecutionException e) {
                        // shut down: nothing runs after that
                    }
                }

                @Override
                public boolean isShutdown() {
                    return executor.isShutdown();
                }

                @Override
                public void shutdown(Duration awaitRunning) {
                    executor.shutdown();
                    try {
                        executor.awaitTermination(awaitRunning.toNanos(), TimeUnit.NANOSECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }

                @Override
                public void shutdownNow() {
                    executor.shutdownNow();
                }
            };
        }
    };
}
