package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * What both locks share: the grants this bridge holds, a release kept back for a moment so that this bridge can
 * take the same id again mostly without a statement ({@link #release}), run leases ({@link #lease}), and knowing
 * whether a grant is still this bridge's ({@link #requireOwn}). Its one timer thread frees kept locks, renews
 * leases and writes what a lease kept back. Subclasses say how a lock is taken, renewed and freed in the table, and
 * how to tell whether others wait for a lock this bridge keeps.
 */
public abstract class KeepingLock implements StateLock {
    /** How long a released lock is kept for this bridge to take again; see {@link #release}. */
    public static final Duration KEPT_AFTER_RELEASE = Duration.ofMillis(250);
    /** How long a kept lock is taken again without asking the table whether others wait for it. */
    public static final Duration CHECK_QUEUE_AFTER = Duration.ofSeconds(1);
    private static final Logger log = LoggerFactory.getLogger(KeepingLock.class);

    /**
     * One granting of a lock or lease. Plain grants are replaced when kept and taken again, and compared by identity,
     * so that the timer of an earlier keeping leaves a later one alone.
     */
    protected static final class Grant {
        final String stateId;
        /** What the caller holds; stays the same for the grant's life. */
        final String token;
        /** The lease's run, or null for a plain lock. */
        final Run run;
        final boolean othersWaiting;
        final long checkedAt;
        /** The token in the table: the claims lock takes a lost-but-untaken lock again under a new one. */
        volatile String row;
        /** When a statement last showed the lock this bridge's, sent at (Clock.nanos); ages err on the safe side. */
        volatile long confirmedAt;
        /** Why the grant is no longer this bridge's, once a statement showed that; then nothing is written under it. */
        volatile String lost;
        /**
         * A lease: taken by its kept-back write, and briefly by the caller's acquire, so that the two never overlap. A
         * kept plain lock: taken by the timer's free of it, and by an acquire before it takes the grant back, so that
         * an acquire never takes the lock afresh while this bridge still frees (or writes under) the old grant.
         */
        final ReentrantLock writing = new ReentrantLock();
        /** A lease: how many of the caller's acquires are not released yet, and how many releases there were. */
        int inUse;
        int releases;
        volatile ScheduledFuture<?> renewal;

        Grant(String stateId, String token, Run run, long confirmedAt, boolean othersWaiting, long checkedAt) {
            this.stateId = stateId;
            this.token = token;
            this.row = token;
            this.run = run;
            this.confirmedAt = confirmedAt;
            this.othersWaiting = othersWaiting;
            this.checkedAt = checkedAt;
        }

        /** The same granting, handed to the caller again. */
        Grant again(boolean othersWaiting, long checkedAt) {
            Grant grant = new Grant(stateId, token, run, confirmedAt, othersWaiting, checkedAt);
            grant.row = row;
            return grant;
        }
    }

    protected final ClickHouse ch;
    protected final Clock clock;
    protected final LockTables tables;
    protected final Duration staleAfter;
    /** Every grant not yet freed in the table (held, kept or leased), by token. */
    private final Map<String, Grant> live = new ConcurrentHashMap<>();
    private final Map<String, Grant> held = new ConcurrentHashMap<>(); // plain, by token: acquired, not released
    private final Map<String, Grant> kept = new ConcurrentHashMap<>(); // plain, by state id: released by the caller only
    private final Map<String, Grant> leases = new ConcurrentHashMap<>(); // by state id
    private final ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, r -> {
        Thread t = new Thread(r, "lock-timer");
        t.setDaemon(true);
        return t;
    });
    private volatile BeforeFree beforeFree = (stateId, token) -> { };

    protected KeepingLock(ClickHouse ch, LockTables tables, Duration staleAfter) {
        this.ch = ch;
        this.clock = ch.clock();
        this.tables = tables;
        this.staleAfter = staleAfter;
        timer.setExecuteExistingDelayedTasksAfterShutdownPolicy(false); // close() frees what is kept itself
        timer.setContinueExistingPeriodicTasksAfterShutdownPolicy(false);
    }

    @Override
    public final void beforeFree(BeforeFree action) {
        beforeFree = action;
    }

    /**
     * Takes the lock in the table under tokens from {@code tokens}, trying every {@code retry} until {@code wait}
     * after {@code start} (Clock.nanos), then throws {@link #gaveUp}. After each failed try, {@code onHolder} gets
     * the token of whoever holds the lock; it may throw to stop waiting. {@code justYielded}: this bridge freed it a
     * moment ago for someone waiting.
     */
    protected abstract Grant take(String stateId, Supplier<String> tokens, Run run, Duration retry, Duration wait,
                                  long start, boolean justYielded, Consumer<String> onHolder);

    /** Whether the kept lock is still this bridge's and nobody waits for it (one query). */
    protected abstract boolean nobodyWaits(Grant kept);

    /** Frees the lock in the table. */
    protected abstract void free(String stateId, String token);

    /**
     * Extends the grant's lock in the table if it is still this bridge's: then answers null. Otherwise answers the
     * token of whoever holds it now ("" for nobody, when this bridge cannot show that nobody held it meanwhile).
     */
    protected abstract String renew(Grant grant);

    /** Frees another holder's lock in the table, whatever its age (a forced run taking a lease over). */
    protected abstract void evict(String stateId, String token);

    /** How long ago the holder of {@code token} last took or renewed it; null when it holds nothing. */
    protected abstract Duration renewedAgo(String stateId, String token);

    /** Every live lease in the table. */
    protected abstract List<LiveLease> liveLeases();

    /**
     * Takes the lock: a lease this bridge holds at once; a lock it kept since a release mostly without a statement;
     * else in the table. Statements are tried again only within {@code wait}, so that the call ends within it plus
     * one statement's timeout however the server or Keeper fail.
     */
    @Override
    public final String acquire(String stateId, Duration retry, Duration wait) {
        Grant lease = leases.get(stateId);
        if (lease != null) {
            lease.writing.lock(); // after a kept-back write under way
            try {
                if (lease.lost != null) {
                    throw lost(lease);
                }
                lease.inUse++;
                return lease.token;
            } finally {
                lease.writing.unlock();
            }
        }
        return ch.within(wait, "lock_wait_seconds", () -> acquireFresh(stateId, retry, wait));
    }

    private String acquireFresh(String stateId, Duration retry, Duration wait) {
        long start = clock.nanos();
        boolean yielded = false;
        Grant keptGrant = takeKept(stateId, wait);
        if (keptGrant != null) {
            // Taken again only well before it could be taken for stale; an older one is freed and taken afresh.
            if (start - keptGrant.confirmedAt < staleAfter.toNanos() / 2) {
                // A held lock stays held, so asking again only tells whether someone waits since; a newcomer waits
                // at most CHECK_QUEUE_AFTER longer for not being asked about.
                if (start - keptGrant.checkedAt < CHECK_QUEUE_AFTER.toNanos()) {
                    return grant(keptGrant.again(false, keptGrant.checkedAt));
                }
                boolean nobody;
                try {
                    nobody = nobodyWaits(keptGrant);
                } catch (BridgeException e) {
                    keep(keptGrant, KEPT_AFTER_RELEASE); // still ours in the table: freed later, or taken again
                    throw e;
                }
                if (nobody) {
                    return grant(keptGrant.again(false, start));
                }
                yielded = true; // let the one waiting go first
            }
            freeGranted(keptGrant);
        }
        return grant(take(stateId, () -> UUID.randomUUID().toString(), null, retry, wait, start, yielded, holder -> { }));
    }

    /**
     * Takes the id's kept grant out of {@link #kept}, after a free of it by the timer that is under way (its kept-back
     * write may take a while when ClickHouse or Keeper do not answer); null when there is none, or that free freed it.
     */
    private Grant takeKept(String stateId, Duration wait) {
        Grant grant = kept.get(stateId);
        if (grant == null) {
            return null;
        }
        try {
            if (!grant.writing.tryLock(wait.toNanos(), TimeUnit.NANOSECONDS)) {
                throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "': this bridge was "
                        + "still writing the state it kept back under its earlier lock of it after " + wait.toMillis()
                        / 1000.0 + " s (lock_wait_seconds): ClickHouse or Keeper do not answer. Try again.");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "Interrupted while waiting for a lock.");
        }
        try {
            return kept.remove(stateId, grant) ? grant : null;
        } finally {
            grant.writing.unlock();
        }
    }

    private String grant(Grant grant) {
        held.put(grant.token, grant);
        live.put(grant.token, grant);
        return grant.token;
    }

    /**
     * Takes the run lease on the id for {@code run}, unless this bridge holds it already; keeps it until
     * {@link #close}, renewing it every third of {@code staleAfter}. A plain lock held by another process is waited
     * for as by {@link #acquire}; a lease of another run is refused at once ({@link ErrorCode#RUN_IN_PROGRESS}), or
     * with {@link Run#force()} taken over. A lease of this same run (left by a bridge of it that died) is taken over.
     * Taking one over waits until its holder's last renewal is {@code staleAfter} old: by then that holder writes
     * nothing more, as every write first makes sure the lock is still its own ({@link #requireOwn}).
     */
    @Override
    public final synchronized void lease(String stateId, Run run, Duration retry, Duration wait) {
        if (leases.containsKey(stateId)) {
            return;
        }
        ch.within(wait, "lock_wait_seconds", () -> {
            takeLease(stateId, run, retry, wait);
            return null;
        });
    }

    private void takeLease(String stateId, Run run, Duration retry, Duration wait) {
        Grant keptGrant = takeKept(stateId, wait);
        if (keptGrant != null) {
            freeGranted(keptGrant);
        }
        long[] fenceUntil = {0};
        Grant lease = take(stateId, () -> run.newToken(clock.wallMillis()), run, retry, wait, clock.nanos(), false, holder -> {
            Run.Holder other = Run.holder(holder);
            if (other == null) {
                return; // a plain lock (a `meltano state` command): wait for it
            }
            Duration ago = renewedAgo(stateId, holder);
            if (!other.run().equals(run.id()) && !run.force()) {
                throw new BridgeException(ErrorCode.RUN_IN_PROGRESS, "Another run of state id '" + stateId + "' is in "
                        + "progress: " + other.describe() + renewed(ago) + ". Wait for it to end, or run with --force "
                        + "(MELTANO_RUN_FORCE=true) to take the state id over from it. A run that died holds it for "
                        + "lock_timeout_seconds (" + staleAfter.toMillis() / 1000.0 + " s) after its last renewal.");
            }
            log.warn("Taking the state id '{}' over from {}{}{}.", stateId, other.describe(), renewed(ago),
                    other.run().equals(run.id()) ? " (this same run, whose earlier bridge died)" : " (--force)");
            evict(stateId, holder);
            long left = ago == null ? 0 : staleAfter.minus(ago).toNanos();
            fenceUntil[0] = Math.max(fenceUntil[0], clock.nanos() + left);
        });
        leases.put(stateId, lease);
        live.put(lease.token, lease);
        long every = staleAfter.toNanos() / 3;
        // The first renewal counts from when the lock was last shown ours (a claim may have waited in line since).
        long first = Math.max(0, lease.confirmedAt + every - clock.nanos());
        lease.renewal = timer.scheduleWithFixedDelay(() -> renewLease(lease), first, every, TimeUnit.NANOSECONDS);
        long wait0 = fenceUntil[0] - clock.nanos();
        if (wait0 > 0) {
            log.warn("Waiting {} s until the displaced run's lease on '{}' is stale: it writes nothing after that.",
                    wait0 / 1_000_000_000.0, stateId);
            sleep(Duration.ofNanos(wait0));
        }
    }

    private static String renewed(Duration ago) {
        return ago == null ? "" : ", lease renewed " + ago.toMillis() / 1000.0 + " s ago";
    }

    private void renewLease(Grant lease) {
        if (lease.lost != null) {
            return;
        }
        try {
            confirm(lease);
        } catch (BridgeException e) {
            log.warn("Could not renew the run lease on '{}': {} Trying again in {} s.", lease.stateId, e.getMessage(),
                    staleAfter.toMillis() / 3000.0);
        }
    }

    /** Asks the table whether the grant is still this bridge's, extending it if so; records the answer. */
    private void confirm(Grant grant) {
        synchronized (grant) {
            long sentAt = clock.nanos();
            String holder = renew(grant);
            if (holder == null) {
                grant.confirmedAt = sentAt;
                return;
            }
            Run.Holder other = Run.holder(holder);
            String who = other != null ? "the run " + other.describe() : holder.isEmpty() ? "another process (it "
                    + "freed this bridge's lock, as a forced run does, or took it while it was stale and freed it)"
                    : "another process";
            grant.lost = (grant.run != null ? "The run lease on state id '" + grant.stateId + "' was taken over by "
                    : "The lock on state id '" + grant.stateId + "' went stale and was taken by ") + who
                    + " (noticed at " + Instant.ofEpochMilli(clock.wallMillis()) + "): this bridge writes no more state of it, and the newest "
                    + "bookmark it kept back was not written; the stored one stays as it was.";
            log.warn(grant.lost);
        }
    }

    /**
     * Throws unless the grant of {@code token} is still this bridge's for long enough to send a write that lands
     * before the lock could be taken from it: within two thirds of {@code staleAfter} of its last confirmation, else
     * after one more confirming statement.
     */
    @Override
    public final void requireOwn(String token) {
        requireOwn(token, staleAfter.toNanos() * 2 / 3);
    }

    @Override
    public final void confirmOwn(String token) {
        requireOwn(token, 0);
    }

    /** Throws unless the grant is still this bridge's, confirming it first when its last confirmation is that old. */
    private void requireOwn(String token, long confirmWhenOlderNanos) {
        Grant grant = liveGrant(token);
        if (grant.lost == null && clock.nanos() - grant.confirmedAt >= confirmWhenOlderNanos) {
            confirm(grant);
        }
        if (grant.lost != null) {
            throw lost(grant);
        }
    }

    @Override
    public final String heldCondition(String token) {
        Grant grant = liveGrant(token);
        return holds(grant.stateId, grant.row);
    }

    /** The SQL condition of {@link #heldCondition} for the token {@code row} in the table. */
    protected abstract String holds(String stateId, String row);

    private Grant liveGrant(String token) {
        Grant grant = live.get(token);
        if (grant == null) {
            throw new BridgeException(ErrorCode.LOCK_LOST, "The lock this write was made under is no longer held.");
        }
        return grant;
    }

    private static BridgeException lost(Grant grant) {
        return new BridgeException(ErrorCode.LOCK_LOST, grant.lost);
    }

    @Override
    public final String heldToken(String stateId) {
        Grant lease = leases.get(stateId);
        if (lease != null) {
            return lease.token;
        }
        for (Grant grant : held.values()) {
            if (grant.stateId.equals(stateId)) {
                return grant.token;
            }
        }
        return null;
    }

    @Override
    public final List<LiveLease> runs() {
        return liveLeases();
    }

    /**
     * Runs {@link BeforeFree}, then frees the lock in the table (unless it was lost). When what was kept back under it
     * cannot be written, or the lock not freed, for a passing reason (Keeper or the server away), a plain lock is kept,
     * and the write and free tried again later ({@link #keep}): freed, it could be taken by another process, and then
     * the kept-back state could never be written; not freed and forgotten, this bridge would wait for its own lock.
     */
    private void freeGranted(Grant grant) {
        boolean written = false;
        try {
            if (grant.lost == null) {
                beforeFree.run(grant.stateId, grant.token);
                written = true;
                free(grant.stateId, grant.row);
            }
            live.remove(grant.token, grant);
        } catch (BridgeException e) {
            // Kept while it may still be ours: for what it kept back, or only to free it while it is not stale yet.
            boolean mayBeOurs = !written || clock.nanos() - grant.confirmedAt < staleAfter.toNanos();
            if (grant.lost == null && grant.run == null && !timer.isShutdown() && mayBeOurs) {
                keep(grant, staleAfter.dividedBy(3));
            } else {
                live.remove(grant.token, grant); // a lease is let go at close; an unfreed lock goes stale
            }
            throw e;
        }
    }

    /** Keeps the plain grant for this bridge to take again, and frees it (writing what it kept back) after {@code d}. */
    private void keep(Grant grant, Duration d) {
        held.remove(grant.token, grant);
        kept.put(grant.stateId, grant);
        if (!timer.isShutdown()) {
            timer.schedule(() -> releaseKept(grant), d.toNanos(), TimeUnit.NANOSECONDS);
        }
    }

    /**
     * A lease: stays held, and what the store kept back under it is written {@link #KEPT_AFTER_RELEASE} later unless
     * the caller takes it again first. A plain lock: when others were waiting as it was granted, frees it now.
     * Otherwise answers at once and frees it {@link #KEPT_AFTER_RELEASE} later, or on {@link #close}: Meltano takes
     * the lock once per STATE message, so the next acquire of the same id usually comes from this bridge within that
     * time, and then gets the lock back without a statement (with one query, to see who waits, once per
     * {@link #CHECK_QUEUE_AFTER}) — unless another process waits, which then goes first.
     */
    @Override
    public final void release(String token) {
        Grant lease = live.get(token);
        if (lease != null && lease.run != null) {
            int release;
            lease.writing.lock();
            try {
                lease.inUse = Math.max(0, lease.inUse - 1);
                release = ++lease.releases;
            } finally {
                lease.writing.unlock();
            }
            timer.schedule(() -> writeKeptBack(lease, release), KEPT_AFTER_RELEASE.toMillis(), TimeUnit.MILLISECONDS);
            return;
        }
        Grant grant = held.remove(token);
        if (grant == null) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "Unknown lock token: it was never granted by this "
                    + "bridge, or it was already released.");
        }
        if (grant.othersWaiting) {
            freeGranted(grant);
            return;
        }
        keep(grant, KEPT_AFTER_RELEASE);
    }

    /** Writes what the store kept back under the lease, unless the caller took the lease again meanwhile. */
    private void writeKeptBack(Grant lease, int release) {
        lease.writing.lock();
        try {
            if (lease.inUse == 0 && lease.releases == release && lease.lost == null) {
                beforeFree.run(lease.stateId, lease.token);
            }
        } catch (BridgeException e) {
            log.warn("Could not write the newest state of '{}': {}", lease.stateId, e.getMessage());
            if (lease.lost == null && !timer.isShutdown()) {
                timer.schedule(() -> writeKeptBack(lease, release), staleAfter.toNanos() / 3, TimeUnit.NANOSECONDS);
            }
        } finally {
            lease.writing.unlock();
        }
    }

    /**
     * Frees every kept lock, held one and lease: a caller that never released it is gone (its Meltano exited). A
     * release the timer is running is let finish first, for at most {@code staleAfter}: its lock is stale by then.
     */
    @Override
    public final void close() {
        timer.shutdown();
        try {
            timer.awaitTermination(staleAfter.toNanos(), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Grant grant : held.values()) {
            if (held.remove(grant.token, grant)) {
                kept.put(grant.stateId, grant);
            }
        }
        kept.values().forEach(this::releaseKept);
        for (Grant lease : leases.values()) {
            if (leases.remove(lease.stateId, lease)) {
                freeQuietly(lease);
            }
        }
    }

    /** Frees the grant if it is still kept; one that could not be freed but may still be ours stays kept. */
    private void releaseKept(Grant grant) {
        grant.writing.lock();
        try {
            if (kept.get(grant.stateId) == grant) {
                freeQuietly(grant);
                if (!live.containsKey(grant.token)) {
                    kept.remove(grant.stateId, grant);
                }
            }
        } finally {
            grant.writing.unlock();
        }
    }

    private void freeQuietly(Grant grant) {
        try {
            freeGranted(grant);
        } catch (BridgeException e) {
            log.warn("Could not release the lock on state id '{}': {} The lock goes stale after {} s.",
                    grant.stateId, e.getMessage(), staleAfter.toMillis() / 1000.0);
        }
    }

    /** Why {@code acquire} gave up, naming the run that holds the id when a run does. */
    protected final BridgeException gaveUp(String stateId, Duration wait, String holder) {
        Run.Holder run = Run.holder(holder);
        if (run != null) {
            return new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "' is held by the run "
                    + run.describe() + renewed(renewedAgo(stateId, holder)) + ", and was not released within "
                    + wait.toMillis() / 1000.0 + " s. Change it once that run has ended.");
        }
        return new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "' is locked by another "
                + "process and was not released within " + wait.toMillis() / 1000.0 + " s. If no other Meltano "
                + "run uses it, the lock goes stale after " + staleAfter.toMillis() / 1000.0 + " s; try again.");
    }

    protected void sleep(Duration d) {
        try {
            clock.sleep(d);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "Interrupted while waiting for a lock.");
        }
    }
}
