package io.github.chstate.bridge.clock;

import java.time.Duration;

/**
 * One background thread's schedule of one-shot tasks, on its {@link Clock}'s time: the system's runs them on a daemon
 * thread of its own; a test's runs them when the test moves its clock.
 */
public interface Timer {
    /** Runs {@code task} once, {@code delayNanos} from now (at once if not positive); nothing after a shutdown. */
    void schedule(Runnable task, long delayNanos);

    boolean isShutdown();

    /** Drops the tasks not started, and waits up to {@code awaitRunning} for the one running, if any. */
    void shutdown(Duration awaitRunning);

    /** Drops the tasks not started, and interrupts the one running. */
    void shutdownNow();
}
