package io.github.chstate.bridge.lock;

import java.time.Duration;

/** A lock per state id, held around each of Meltano's updates; the store does not care which kind it is. */
public interface StateLock extends AutoCloseable {
    /** What runs before this bridge frees a lock in the table, while the lock is still its own. */
    @FunctionalInterface
    interface BeforeFree {
        /** Throws when what it does fails; the lock is then not freed, and goes stale. */
        void run(String stateId, String token);
    }

    /** Returns the token that releases the lock, or throws LOCK_NOT_ACQUIRED when {@code wait} has passed. */
    String acquire(String stateId, Duration retry, Duration wait);

    /** Releases the lock the token was granted for; throws INVALID_PARAMS for a token this bridge does not hold. */
    void release(String token);

    /**
     * The token of this bridge's granted, not yet released lock on the id, or null. While one token is held, nobody
     * else has held the id since it was granted: what this bridge read or wrote under it is still the newest.
     */
    String heldToken(String stateId);

    /** Sets what runs before every freeing of a lock this bridge was granted (the store writes what it kept back). */
    void beforeFree(BeforeFree action);

    /** Frees every lock this bridge still holds or keeps, running {@link BeforeFree} for each. */
    @Override
    void close();
}
