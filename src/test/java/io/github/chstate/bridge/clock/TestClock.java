package io.github.chstate.bridge.clock;

import java.time.Duration;
import java.util.Comparator;
import java.util.PriorityQueue;

/**
 * A clock whose time moves only when the test moves it: {@link #advance} runs the timers' tasks that fall due on the
 * way, in order of their time, in the test's thread; {@link #sleep} (the code under test waiting) moves the time and
 * runs nothing. Its wall clock starts at the real time it was made.
 */
public final class TestClock implements Clock {
    private record Due(long at, long order, Runnable task, ManualTimer timer) {
    }

    private final class ManualTimer implements Timer {
        private volatile boolean shutdown;

        @Override
        public void schedule(Runnable task, long delayNanos) {
            if (!shutdown) {
                synchronized (TestClock.this) {
                    due.add(new Due(nanos + Math.max(0, delayNanos), order++, task, this));
                }
            }
        }

        @Override
        public boolean isShutdown() {
            return shutdown;
        }

        @Override
        public void shutdown(Duration awaitRunning) {
            shutdown = true;
        }

        @Override
        public void shutdownNow() {
            shutdown = true;
        }
    }

    private final long wallStart = System.currentTimeMillis();
    private final PriorityQueue<Due> due = new PriorityQueue<>(Comparator.comparingLong(Due::at)
            .thenComparingLong(Due::order));
    private long nanos;
    private long order;

    @Override
    public synchronized long nanos() {
        return nanos;
    }

    @Override
    public long wallMillis() {
        return wallStart + nanos() / 1_000_000;
    }

    @Override
    public synchronized void sleep(Duration pause) {
        nanos += pause.toNanos();
    }

    @Override
    public Timer timer(String name) {
        return new ManualTimer();
    }

    /** Moves the time by {@code d}, running each task that falls due on the way at its time; tasks may add tasks. */
    public void advance(Duration d) {
        long end;
        synchronized (this) {
            end = nanos + d.toNanos();
        }
        while (true) {
            Due next;
            synchronized (this) {
                next = due.peek();
                if (next == null || next.at > end) {
                    nanos = Math.max(nanos, end);
                    return;
                }
                due.poll();
                nanos = Math.max(nanos, next.at);
            }
            if (!next.timer.shutdown) {
                next.task.run();
            }
        }
    }
}
