package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.clock.Timer;
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
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * What both locks share: the grants this bridge holds, a release kept back for a moment so that this bridge can
 * take the same id again mostly without a statement ({@link #release}), run leases ({@link #lease}), and knowing
 * whether a grant is still this bridge's ({@link #requireOwn}, decided in {@link #confirm} alone). Two threads work
 * in the background: the renewer renews leases and nothing else, so that no write or free ever delays a renewal;
 * the timer frees kept locks and writes what a lease kept back. A third, the watch, sends no statement: it says a
 * lease lapsed the moment it does, even while a renewal's statement hangs. Every timing comes from the
 * {@link LeasePolicy}.
 * Subclasses say how a lock is taken, renewed and freed in the table, and how to tell whether others wait for a
 * lock this bridge keeps.
 */
public abstract class KeepingLock implements StateLock {
    private static final Logger log = LoggerFactory.getLogger(KeepingLock.class);

    /**
     * Where a grant is in its life, one field changed by compare-and-set (as HikariCP's pool entries): a plain lock
     * the caller holds, or released and kept by this bridge for a moment; a run's lease; gone (freed in the table,
     * let go, or handed over to a newer grant of the same token).
     */
    enum State { HELD, KEPT, LEASED, FREED }

    /**
     * One granting of a lock or lease. A kept plain grant taken again is handed over to a new one of the same token
     * (this one FREED), so that the timer of an earlier keeping leaves the later one alone. Background work moves a
     * grant only while holding its {@code writing} lock; the request thread moves one it holds.
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
        /** Held while a statement asks the table whether the grant is still ours ({@link #confirm}). */
        final ReentrantLock confirming = new ReentrantLock();
        /** A lease: renewals that failed since the last one that succeeded, and the last one's error. */
        volatile int failedRenewals;
        volatile String lastRenewalError;
        /** A lease: a warning said it went unconfirmed for staleAfter (it may have been taken since). */
        volatile boolean lapseSaid;
        /**
         * A lease: taken by its kept-back write, and briefly by the caller's acquire, so that the two never overlap. A
         * kept plain lock: taken by the timer's free of it, and by an acquire before it takes the grant back, so that
         * an acquire never takes the lock afresh while this bridge still frees (or writes under) the old grant.
         */
        final ReentrantLock writing = new ReentrantLock();
        /** A lease: how many of the caller's acquires are not released yet, and how many releases there were. */
        int inUse;
        int releases;
        final AtomicReference<State> state;

        Grant(String stateId, String token, Run run, long confirmedAt, boolean othersWaiting, long checkedAt) {
            this.stateId = stateId;
            this.token = token;
            this.row = token;
            this.run = run;
            this.confirmedAt = confirmedAt;
            this.othersWaiting = othersWaiting;
            this.checkedAt = checkedAt;
            this.state = new AtomicReference<>(run == null ? State.HELD : State.LEASED);
        }

        boolean is(State s) {
            return state.get() == s;
        }

        boolean moveTo(State from, State to) {
            return state.compareAndSet(from, to);
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
    protected final LeasePolicy policy;
    protected final Duration staleAfter;
    /** Every grant not yet freed in the table (held, kept or leased), by token: its {@link State} says which. */
    private final Map<String, Grant> live = new ConcurrentHashMap<>();
    private final Timer timer;
    private final Timer renewer;
    private final Timer watch;
    private volatile BeforeFree beforeFree = (stateId, token) -> { };

    protected KeepingLock(ClickHouse ch, LockTables tables, LeasePolicy policy) {
        this.ch = ch;
        this.clock = ch.clock();
        this.tables = tables;
        this.policy = policy;
        this.staleAfter = policy.staleAfter();
        this.timer = clock.timer("lock-timer");
        this.renewer = clock.timer("lease-renewer");
        this.watch = clock.timer("lease-watch");
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
     * What a renewal found: {@code holder} null when the lock is still this bridge's, then {@code confirmedAt}
     * (Clock.nanos) is when its row was last written, on the safe side (the time the reading statement was sent, less
     * the row's age on the server's clock); else the token of whoever holds it now ("" for nobody, when this bridge
     * cannot show that nobody held it meanwhile).
     */
    protected record Renewal(String holder, long confirmedAt) {
        static Renewal ours(long readSentAt, long rowAgeMillis) {
            return new Renewal(null, readSentAt - Math.max(0, rowAgeMillis) * 1_000_000);
        }

        static Renewal heldBy(String holder) {
            return new Renewal(holder, 0);
        }
    }

    /**
     * Extends the grant's lock in the table if it is still this bridge's ({@link LeasePolicy#extendableFor}), and
     * says what the table shows after that: a renewal that could not extend the lock says how old it is.
     */
    protected abstract Renewal renew(Grant grant);

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
        Grant lease = find(stateId, State.LEASED);
        if (lease != null) {
            lockWithin(lease.writing, stateId); // after a kept-back write under way
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
        Grant keptGrant = takeKept(stateId);
        if (keptGrant != null) {
            // Taken again only well before it could be taken for stale; an older one is freed and taken afresh.
            if (start - keptGrant.confirmedAt < policy.reuseKeptWithin().toNanos()) {
                // A held lock stays held, so asking again only tells whether someone waits since; a newcomer waits
                // at most CHECK_QUEUE_AFTER longer for not being asked about.
                if (start - keptGrant.checkedAt < LeasePolicy.CHECK_QUEUE_AFTER.toNanos()) {
                    return handOver(keptGrant, keptGrant.again(false, keptGrant.checkedAt));
                }
                boolean nobody;
                try {
                    nobody = nobodyWaits(keptGrant);
                } catch (BridgeException e) {
                    keep(keptGrant, LeasePolicy.KEPT_AFTER_RELEASE); // still ours in the table: freed later, or taken again
                    throw e;
                }
                if (nobody) {
                    return handOver(keptGrant, keptGrant.again(false, start));
                }
                yielded = true; // let the one waiting go first
            }
            freeGranted(keptGrant);
        }
        return grant(take(stateId, () -> UUID.randomUUID().toString(), null, retry, wait, start, yielded, holder -> { }));
    }

    /** The grant of the id in that state, if this bridge has one. */
    private Grant find(String stateId, State state) {
        for (Grant grant : live.values()) {
            if (grant.stateId.equals(stateId) && grant.is(state)) {
                return grant;
            }
        }
        return null;
    }

    /**
     * Takes the id's kept grant back (KEPT to HELD), after a free of it by the timer that is under way (its kept-back
     * write may take a while when ClickHouse or Keeper do not answer); null when there is none, or that free freed it.
     */
    private Grant takeKept(String stateId) {
        Grant grant = find(stateId, State.KEPT);
        if (grant == null) {
            return null;
        }
        lockWithin(grant.writing, stateId);
        try {
            return grant.moveTo(State.KEPT, State.HELD) ? grant : null;
        } finally {
            grant.writing.unlock();
        }
    }

    /**
     * Takes a grant's {@code writing} or {@code confirming} lock, which background work on the grant holds while its
     * statements run: the request thread waits for it at most lock_wait_seconds.
     */
    private void lockWithin(ReentrantLock busy, String stateId) {
        boolean taken;
        try {
            taken = busy.tryLock(policy.lockWait().toNanos(), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "Interrupted while waiting for a lock.");
        }
        if (!taken) {
            throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "': this bridge was still "
                    + "writing, renewing or freeing its lock of it after " + policy.lockWait().toMillis() / 1000.0
                    + " s (lock_wait_seconds): ClickHouse or Keeper do not answer. Try again.");
        }
    }

    private String grant(Grant grant) {
        live.put(grant.token, grant);
        return grant.token;
    }

    /** The kept grant taken back goes on as {@code fresh}, the same lock in the table. */
    private String handOver(Grant taken, Grant fresh) {
        taken.state.set(State.FREED);
        return grant(fresh);
    }

    /**
     * Takes the run lease on the id for {@code run}, unless this bridge holds it already; keeps it until
     * {@link #close}, renewing it every {@link LeasePolicy#renewEvery}. A plain lock held by another process is waited
     * for as by {@link #acquire}; a lease of another run is refused at once ({@link ErrorCode#RUN_IN_PROGRESS}), or
     * with {@link Run#force()} taken over. A lease of this same run (left by a bridge of it that died) is taken over.
     * Taking one over waits until its holder's last renewal is {@code staleAfter} old: by then that holder writes
     * nothing more, as every write first makes sure the lock is still its own ({@link #requireOwn}).
     */
    @Override
    public final synchronized void lease(String stateId, Run run, Duration retry, Duration wait) {
        if (find(stateId, State.LEASED) != null) {
            return;
        }
        ch.within(wait, "lock_wait_seconds", () -> {
            takeLease(stateId, run, retry, wait);
            return null;
        });
    }

    private void takeLease(String stateId, Run run, Duration retry, Duration wait) {
        Grant keptGrant = takeKept(stateId);
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
        live.put(lease.token, lease);
        scheduleRenewal(lease);
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

    /** The lease's next renewal, {@link LeasePolicy#renewEvery} after it was last shown ours (at once if that passed). */
    private void scheduleRenewal(Grant lease) {
        if (lease.lost == null && !renewer.isShutdown()) {
            long confirmedAt = lease.confirmedAt;
            long now = clock.nanos();
            renewer.schedule(() -> renewLease(lease), policy.renewalDue(confirmedAt) - now);
            watch.schedule(() -> sayIfLapsed(lease), confirmedAt + staleAfter.toNanos() - now);
        }
    }

    /**
     * One renewal, on the renewer thread, its statements tried again only within {@link LeasePolicy#renewalDeadline}.
     * A lease that went unconfirmed for staleAfter is said at once (another run may take it from then on); the
     * renewals go on, and the next one that reaches the table says whether it was taken ({@link #confirm}).
     */
    private void renewLease(Grant lease) {
        if (lease.lost != null || !lease.is(State.LEASED)) {
            return;
        }
        sayIfLapsed(lease);
        try {
            ch.within(policy.renewalDeadline(), "a renewal's deadline (lock_timeout_seconds / 4)", () -> {
                confirm(lease);
                return null;
            });
            if (lease.lost == null && lease.lapseSaid) {
                log.warn("The run lease on '{}' is this run's again: nobody had taken it while it lapsed.", lease.stateId);
            }
            lease.failedRenewals = 0;
            lease.lapseSaid = false;
        } catch (BridgeException e) {
            lease.failedRenewals++;
            lease.lastRenewalError = e.getMessage();
            log.warn("Could not renew the run lease on '{}' ({} in a row): {}", lease.stateId, lease.failedRenewals,
                    e.getMessage());
        } finally {
            scheduleRenewal(lease);
        }
    }

    /** Warns, once, when the lease went unconfirmed for staleAfter: from then on another run may take it. */
    private void sayIfLapsed(Grant lease) {
        synchronized (lease) { // the watch and the renewer
            if (lease.lapseSaid || lease.lost != null || !lease.is(State.LEASED)
                    || !policy.lapsed(lease.confirmedAt, clock.nanos())) {
                return;
            }
            lease.lapseSaid = true;
        }
        log.warn("The run lease on '{}' lapsed{}: another run may take it now. This run writes no state of it until a "
                + "renewal shows it still its own.", lease.stateId, lapse(lease));
    }

    /** Why a lease lapsed, when it did: renewals that failed, or none that answered in time. */
    private String lapse(Grant grant) {
        if (!grant.lapseSaid) {
            return "";
        }
        String why = grant.failedRenewals > 0 ? grant.failedRenewals + " renewals in a row failed, the last with: "
                + grant.lastRenewalError : "no renewal answered in time: a statement hangs, or this bridge was paused or starved";
        return " (last shown this run's " + (clock.nanos() - grant.confirmedAt) / 1_000_000 / 1000.0 + " s ago, "
                + "lock_timeout_seconds " + staleAfter.toMillis() / 1000.0 + " s; " + why + ")";
    }

    /**
     * Asks the table whether the grant is still this bridge's, extending it if so, and records the answer: the one
     * place that decides "still ours". The request thread waits for a renewal under way at most lock_wait_seconds.
     */
    private void confirm(Grant grant) {
        lockWithin(grant.confirming, grant.stateId);
        try {
            if (grant.lost != null) {
                return;
            }
            Renewal seen = renew(grant);
            if (seen.holder() == null) {
                grant.confirmedAt = Math.max(grant.confirmedAt, seen.confirmedAt());
                return;
            }
            Run.Holder other = Run.holder(seen.holder());
            String who = other != null ? "the run " + other.describe() : seen.holder().isEmpty() ? "another process "
                    + "(it freed this bridge's lock, as a forced run does, or took it while it was stale and freed it)"
                    : "another process";
            String how = grant.run == null ? "The lock on state id '" + grant.stateId + "' went stale and was taken by "
                    : "The run lease on state id '" + grant.stateId + "' was taken over by ";
            grant.lost = how + who + (grant.lapseSaid ? " after it lapsed" + lapse(grant) : "") + " (noticed at "
                    + Instant.ofEpochMilli(clock.wallMillis()) + "): "
                    + "this bridge writes no more state of it, and the newest bookmark it kept back was not written; the "
                    + "stored one stays as it was.";
            log.warn(grant.lost);
        } finally {
            grant.confirming.unlock();
        }
    }

    /**
     * Throws unless the grant of {@code token} is still this bridge's for long enough to send a write that lands
     * before the lock could be taken from it: within {@link LeasePolicy#writeWithoutConfirmWithin} of its last
     * confirmation, else after one more confirming statement.
     */
    @Override
    public final void requireOwn(String token) {
        requireOwn(token, policy.writeWithoutConfirmWithin().toNanos());
    }

    @Override
    public final void confirmOwn(String token) {
        requireOwn(token, 0);
    }

    /**
     * Throws unless the grant is still this bridge's, confirming it first when its last confirmation is that old. A
     * grant the table shows ours but could not extend (its row older than {@link LeasePolicy#extendableFor}) is still
     * written under: the server drops the write if the lock went stale before it landed ({@link #heldCondition}).
     */
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
        Grant grant = find(stateId, State.LEASED);
        if (grant == null) {
            grant = find(stateId, State.HELD);
        }
        return grant == null ? null : grant.token;
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
            gone(grant);
        } catch (BridgeException e) {
            // Kept while it may still be ours: for what it kept back, or only to free it while it is not stale yet.
            boolean mayBeOurs = !written || !policy.lapsed(grant.confirmedAt, clock.nanos());
            if (grant.lost == null && grant.run == null && !timer.isShutdown() && mayBeOurs) {
                keep(grant, policy.freeAgainAfter());
            } else {
                gone(grant); // a lease is let go at close; an unfreed lock goes stale
            }
            throw e;
        }
    }

    private void gone(Grant grant) {
        grant.state.set(State.FREED);
        live.remove(grant.token, grant);
    }

    /**
     * Keeps the plain grant for this bridge to take again, and frees it (writing what it kept back) after {@code d}.
     * Called by whoever holds the grant: the request thread (HELD), or the timer freeing it (KEPT, under writing).
     */
    private void keep(Grant grant, Duration d) {
        grant.state.set(State.KEPT);
        timer.schedule(() -> releaseKept(grant), d.toNanos());
    }

    /**
     * A lease: stays held, and what the store kept back under it is written {@link LeasePolicy#KEPT_AFTER_RELEASE}
     * later unless the caller takes it again first. A plain lock: when others were waiting as it was granted, frees it
     * now. Otherwise answers at once and frees it that much later, or on {@link #close}: Meltano takes
     * the lock once per STATE message, so the next acquire of the same id usually comes from this bridge within that
     * time, and then gets the lock back without a statement (with one query, to see who waits, once per
     * {@link LeasePolicy#CHECK_QUEUE_AFTER}) — unless another process waits, which then goes first.
     */
    @Override
    public final void release(String token) {
        Grant lease = live.get(token);
        if (lease != null && lease.is(State.LEASED)) {
            int release;
            lockWithin(lease.writing, lease.stateId);
            try {
                lease.inUse = Math.max(0, lease.inUse - 1);
                release = ++lease.releases;
            } finally {
                lease.writing.unlock();
            }
            timer.schedule(() -> writeKeptBack(lease, release), LeasePolicy.KEPT_AFTER_RELEASE.toNanos());
            return;
        }
        Grant grant = live.get(token);
        if (grant == null || !grant.is(State.HELD)) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "Unknown lock token: it was never granted by this "
                    + "bridge, or it was already released.");
        }
        if (grant.othersWaiting) {
            lockWithin(grant.writing, grant.stateId); // an acquire of the id waits for this free, then finds it gone
            try {
                if (grant.moveTo(State.HELD, State.KEPT)) {
                    freeGranted(grant);
                }
            } finally {
                grant.writing.unlock();
            }
            return;
        }
        if (grant.moveTo(State.HELD, State.KEPT)) {
            keep(grant, LeasePolicy.KEPT_AFTER_RELEASE);
        }
    }

    /**
     * Writes what the store kept back under the lease, unless the caller took the lease again meanwhile; a write that
     * failed for a passing reason is tried again {@link LeasePolicy#writeAgainAfter} later, each try within that.
     */
    private void writeKeptBack(Grant lease, int release) {
        lease.writing.lock();
        try {
            if (lease.inUse == 0 && lease.releases == release && lease.lost == null && lease.is(State.LEASED)) {
                ch.within(policy.writeAgainAfter(), "a kept-back write's deadline (lock_timeout_seconds / 4)", () -> {
                    beforeFree.run(lease.stateId, lease.token);
                    return null;
                });
            }
        } catch (BridgeException e) {
            log.warn("Could not write the newest state of '{}': {}", lease.stateId, e.getMessage());
            if (lease.lost == null && !timer.isShutdown()) {
                timer.schedule(() -> writeKeptBack(lease, release), policy.writeAgainAfter().toNanos());
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
        renewer.shutdownNow();
        watch.shutdownNow();
        timer.shutdown(staleAfter); // close() frees what is kept itself
        for (Grant grant : live.values()) {
            if (grant.moveTo(State.HELD, State.KEPT) || grant.is(State.KEPT)) {
                releaseKept(grant);
            } else if (grant.is(State.LEASED)) {
                freeQuietly(grant);
            }
        }
    }

    /** Frees the grant if it is still kept; one that could not be freed but may still be ours stays kept. */
    private void releaseKept(Grant grant) {
        grant.writing.lock();
        try {
            if (grant.is(State.KEPT)) {
                freeQuietly(grant);
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
