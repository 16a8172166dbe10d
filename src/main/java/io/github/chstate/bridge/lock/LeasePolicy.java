package io.github.chstate.bridge.lock;

import java.time.Duration;

/**
 * Every timing of a lock and a run lease, derived from {@code lock_timeout_seconds} (T) and
 * {@code lock_wait_seconds}: the one place that decides them (docs/lock.md, "The timeline of a lease", shows them at
 * the defaults). A lock not shown this bridge's for T may be taken by another; everything else keeps well inside that.
 *
 * @param staleAfter T: a lock whose holder did not renew it for this long may be taken over
 * @param lockWait   how long a caller waits for anything to do with a lock, on the request thread
 */
public record LeasePolicy(Duration staleAfter, Duration lockWait) {
    /** How long a released plain lock is kept for this bridge to take again without a statement. */
    public static final Duration KEPT_AFTER_RELEASE = Duration.ofMillis(250);
    /** How long a kept plain lock is taken again without asking the table whether others wait for it. */
    public static final Duration CHECK_QUEUE_AFTER = Duration.ofSeconds(1);

    /** A lease is renewed this long after it was last shown this bridge's: T/4 (2.5 s at T = 10 s). */
    public Duration renewEvery() {
        return staleAfter.dividedBy(4);
    }

    /**
     * Each renewal's statements are tried again only within this (T/4), so that three renewals in a row can fail
     * before the lease could be taken: a renewal never waits behind the next one.
     */
    public Duration renewalDeadline() {
        return staleAfter.dividedBy(4);
    }

    /**
     * A claim is extended only while its newest row is younger than this (3T/4): a token that may go stale while the
     * extending statement runs is never made live again, which could put it ahead of a claim that took over.
     */
    public Duration extendableFor() {
        return staleAfter.multipliedBy(3).dividedBy(4);
    }

    /**
     * A write is sent without asking the table first only within this (T/2) of the lock's last confirmation: it
     * then lands long before the lock could be taken from this bridge.
     */
    public Duration writeWithoutConfirmWithin() {
        return staleAfter.dividedBy(2);
    }

    /** A kept plain lock is taken again only within this (T/2) of its last confirmation; an older one is freed. */
    public Duration reuseKeptWithin() {
        return staleAfter.dividedBy(2);
    }

    /** A claim waiting in line is withdrawn and made afresh after this (T/2), well before it could be taken for stale. */
    public Duration reclaimAfter() {
        return staleAfter.dividedBy(2);
    }

    /** A plain lock whose free failed for a passing reason is freed again after this (T/3). */
    public Duration freeAgainAfter() {
        return staleAfter.dividedBy(3);
    }

    /** A lease's kept-back write that failed for a passing reason is tried again after this (T/4). */
    public Duration writeAgainAfter() {
        return staleAfter.dividedBy(4);
    }

    /**
     * Claim rows younger than this (3T) are read to find the live ones: a lease renews at least every T, so a lease
     * older than that has a row there from well before any live claim of another token.
     */
    public Duration claimsReadWindow() {
        return staleAfter.multipliedBy(3);
    }

    /** Whether a lock last shown this bridge's at {@code confirmedAt} (Clock.nanos) may have been taken at {@code now}. */
    public boolean lapsed(long confirmedAt, long now) {
        return now - confirmedAt >= staleAfter.toNanos();
    }

    /** When the lease last shown this bridge's at {@code confirmedAt} is due for renewal (Clock.nanos). */
    public long renewalDue(long confirmedAt) {
        return confirmedAt + renewEvery().toNanos();
    }
}
