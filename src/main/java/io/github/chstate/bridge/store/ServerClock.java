package io.github.chstate.bridge.store;

import io.github.chstate.bridge.clock.Clock;

/**
 * The server's clock, read once and then advanced by this machine's monotonic clock. It runs ahead of the server
 * by the time the reading took to reach the server (about a millisecond), never behind.
 */
record ServerClock(long serverMillis, long localNanosBeforeReading, Clock local) {
    long nowMillis() {
        return serverMillis + (local.nanos() - localNanosBeforeReading) / 1_000_000;
    }
}
