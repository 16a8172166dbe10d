package io.github.chstate.bridge.lock;

import java.time.Duration;
import java.util.List;

/**
 * A lock per state id: held around each of Meltano's updates, or for a whole run as a lease (docs/lock.md). The
 * store does not care which kind of lock it is.
 */
public interface StateLock extends AutoCloseable {
    /** What runs before this bridge frees a lock in the table, while the lock is still its own. */
    @FunctionalInterface
    interface BeforeFree {
        /** Throws when what it does fails; the lock is then not freed, and goes stale. */
        void run(String stateId, String token);
    }

    /** A run's lease as the table shows it: its token names the run ({@link Run#holder}). */
    record LiveLease(String stateId, String token, Duration renewedAgo) {
    }

    /** Returns the token that releases the lock, or throws LOCK_NOT_ACQUIRED when {@code wait} has passed. */
    String acquire(String stateId, Duration retry, Duration wait);

    /** Releases the lock the token was granted for; throws INVALID_PARAMS for a token this bridge does not hold. */
    void release(String token);

    /**
     * Takes the run lease on the id for the rest of this bridge's life, unless it holds it already: from then on
     * {@link #acquire} of the id answers the lease's token at once. Throws RUN_IN_PROGRESS while another run holds it.
     */
    void lease(String stateId, Run run, Duration retry, Duration wait);

    /**
     * The token of this bridge's granted, not yet released lock or lease on the id, or null. While one token is held,
     * nobody else has held the id since it was granted: what this bridge read or wrote under it is still the newest.
     */
    String heldToken(String stateId);

    /**
     * Throws LOCK_LOST unless the lock is surely still this bridge's for long enough to send a write under it now:
     * asks the table (one or two statements) when its last confirmation is too old to say.
     */
    void requireOwn(String token);

    /** Asks the table whether the token's lock is still this bridge's (extending it if so); throws LOCK_LOST if not. */
    void confirmOwn(String token);

    /**
     * An SQL condition that holds exactly while the token's lock is this bridge's in the table, for the server to
     * check as it inserts a write made under it ({@code INSERT … SELECT … WHERE}).
     */
    String heldCondition(String token);

    /** Every run lease live in the table, of every runner. */
    List<LiveLease> runs();

    /**
     * Sets what runs before every freeing of a lock this bridge was granted, and after a lease's holder released it
     * (the store writes what it kept back).
     */
    void beforeFree(BeforeFree action);

    /** Frees every lock and lease this bridge still holds or keeps, running {@link BeforeFree} for each. */
    @Override
    void close();
}
