package io.github.chstate.bridge.store;

/**
 * The server's clock, read once and then advanced by this machine's monotonic clock. It runs ahead of the server
 * by the time the reading took to reach the server (about a millisecond), never behind.
 */
record ServerClock(long serverMillis, long localNanosBeforeReading) {
    long nowMillis() {
        return serverMillis + (System.nanoTime() - localNanosBeforeReading) / 1_000_000;
    }
}
