package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * What both locks share: the tokens this bridge holds, and a release kept back for a moment so that this bridge can
 * take the same id again, mostly without a statement (see {@link #release}). Subclasses say how a lock is taken in
 * the table, how it is freed there, and how to tell whether others wait for a lock this bridge keeps.
 */
public abstract class KeepingLock implements StateLock {
    /** How long a released lock is kept for this bridge to take again; see {@link #release}. */
    public static final Duration KEPT_AFTER_RELEASE = Duration.ofMillis(250);
    /** How long a kept lock is taken again without asking the table whether others wait for it. */
    public static final Duration CHECK_QUEUE_AFTER = Duration.ofSeconds(1);
    private static final Logger log = LoggerFactory.getLogger(KeepingLock.class);

    /**
     * One granting of a lock, and whether others were waiting when the table was last asked. Compared by identity,
     * so that the timer of an earlier keeping leaves a later one alone.
     *
     * @param takenAt when the statement that took the lock in the table was sent (System.nanoTime): the table's own
     *                time is later, so ages measured from here err on the safe side
     */
    protected static final class Grant {
        final String stateId;
        final String token;
        final long takenAt;
        final boolean othersWaiting;
        final long checkedAt;

        Grant(String stateId, String token, long takenAt, boolean othersWaiting, long checkedAt) {
            this.stateId = stateId;
            this.token = token;
            this.takenAt = takenAt;
            this.othersWaiting = othersWaiting;
            this.checkedAt = checkedAt;
        }
    }

    protected final ClickHouse ch;
    protected final LockTables tables;
    protected final Duration staleAfter;
    private final Map<String, Grant> held = new ConcurrentHashMap<>(); // by token
    private final Map<String, Grant> kept = new ConcurrentHashMap<>(); // by state id: released by the caller only
    private final ScheduledThreadPoolExecutor releaser = new ScheduledThreadPoolExecutor(1, r -> {
        Thread t = new Thread(r, "lock-releaser");
        t.setDaemon(true);
        return t;
    });
    private volatile BeforeFree beforeFree = (stateId, token) -> { };

    protected KeepingLock(ClickHouse ch, LockTables tables, Duration staleAfter) {
        this.ch = ch;
        this.tables = tables;
        this.staleAfter = staleAfter;
        releaser.setExecuteExistingDelayedTasksAfterShutdownPolicy(false); // close() frees what is kept itself
    }

    @Override
    public final void beforeFree(BeforeFree action) {
        beforeFree = action;
    }

    /**
     * Takes the lock in the table, trying every {@code retry} until {@code wait} after {@code start}
     * (System.nanoTime), then throws {@link #gaveUp}. {@code justYielded}: this bridge freed it a moment ago for
     * someone waiting.
     */
    protected abstract Grant take(String stateId, Duration retry, Duration wait, long start, boolean justYielded);

    /** Whether the kept lock is still this bridge's and nobody waits for it (one query). */
    protected abstract boolean nobodyWaits(Grant kept);

    /** Frees the lock in the table. */
    protected abstract void free(String stateId, String token);

    @Override
    public final String acquire(String stateId, Duration retry, Duration wait) {
        long start = System.nanoTime();
        boolean yielded = false;
        Grant keptGrant = kept.remove(stateId);
        if (keptGrant != null) {
            // Taken again only well before it could be taken for stale; an older one is freed and taken afresh.
            if (start - keptGrant.takenAt < staleAfter.toNanos() / 2) {
                // A held lock stays held, so asking again only tells whether someone waits since; a newcomer waits
                // at most CHECK_QUEUE_AFTER longer for not being asked about.
                if (start - keptGrant.checkedAt < CHECK_QUEUE_AFTER.toNanos()) {
                    return grant(new Grant(stateId, keptGrant.token, keptGrant.takenAt, false, keptGrant.checkedAt));
                }
                if (nobodyWaits(keptGrant)) {
                    return grant(new Grant(stateId, keptGrant.token, keptGrant.takenAt, false, start));
                }
                yielded = true; // let the one waiting go first
            }
            freeGranted(keptGrant);
        }
        return grant(take(stateId, retry, wait, start, yielded));
    }

    private String grant(Grant grant) {
        held.put(grant.token, grant);
        return grant.token;
    }

    @Override
    public final String heldToken(String stateId) {
        for (Grant grant : held.values()) {
            if (grant.stateId.equals(stateId)) {
                return grant.token;
            }
        }
        return null;
    }

    /** Runs {@link BeforeFree}, then frees the lock in the table. */
    private void freeGranted(Grant grant) {
        beforeFree.run(grant.stateId, grant.token);
        free(grant.stateId, grant.token);
    }

    /**
     * When others were waiting as the lock was granted, frees it now. Otherwise answers at once and frees it
     * {@link #KEPT_AFTER_RELEASE} later, or on {@link #close}: Meltano takes the lock once per STATE message, so the
     * next acquire of the same id usually comes from this bridge within that time, and then gets the lock back without
     * a statement (with one query, to see who waits, once per {@link #CHECK_QUEUE_AFTER}) — unless another process
     * waits, which then goes first.
     */
    @Override
    public final void release(String token) {
        Grant grant = held.remove(token);
        if (grant == null) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "Unknown lock token: it was never granted by this "
                    + "bridge, or it was already released.");
        }
        if (grant.othersWaiting) {
            freeGranted(grant);
            return;
        }
        kept.put(grant.stateId, grant);
        releaser.schedule(() -> releaseKept(grant), KEPT_AFTER_RELEASE.toMillis(), TimeUnit.MILLISECONDS);
    }

    /**
     * Frees every kept lock, and every held one: a caller that never released it is gone (its Meltano exited). A
     * release the timer is running is let finish first.
     */
    @Override
    public final void close() {
        releaser.shutdown();
        try {
            releaser.awaitTermination(1, TimeUnit.DAYS); // the bridge's exit deadline (Main) bounds this
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Grant grant : held.values()) {
            if (held.remove(grant.token, grant)) {
                kept.put(grant.stateId, grant);
            }
        }
        kept.values().forEach(this::releaseKept);
    }

    private void releaseKept(Grant grant) {
        if (kept.remove(grant.stateId, grant)) {
            try {
                freeGranted(grant);
            } catch (BridgeException e) {
                log.warn("Could not release the lock on state id '{}': {} The lock goes stale after {} s.",
                        grant.stateId, e.getMessage(), staleAfter.toMillis() / 1000.0);
            }
        }
    }

    protected final BridgeException gaveUp(String stateId, Duration wait) {
        return new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "' is locked by another "
                + "process and was not released within " + wait.toMillis() / 1000.0 + " s. If no other Meltano "
                + "run uses it, the lock goes stale after " + staleAfter.toMillis() / 1000.0 + " s; try again.");
    }

    protected static void sleep(Duration d) {
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "Interrupted while waiting for a lock.");
        }
    }
}
