package io.github.chstate.bridge.lock;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The lease's timings keep the promises docs/lock.md ("The timeline of a lease") makes, for any lock_timeout_seconds:
 * checked on the policy's own clock readings, not on a running lock.
 */
class LeasePolicyTest {
    @ParameterizedTest
    @ValueSource(ints = {1, 4, 10, 12, 60, 3600})
    void threeRenewalsCanFailBeforeTheLeaseCouldBeTaken(int seconds) {
        LeasePolicy policy = new LeasePolicy(Duration.ofSeconds(seconds), Duration.ofSeconds(30));
        long t = policy.staleAfter().toNanos();
        long confirmed = 5_000_000_000L; // any clock reading
        long firstDue = policy.renewalDue(confirmed);
        // Each renewal ends (its last try starts) before the next is due: renewals never queue behind each other.
        assertTrue(policy.renewalDeadline().compareTo(policy.renewEvery()) <= 0);
        // The third renewal after a confirmation, with its whole deadline, ends by the time the lease could be taken.
        long thirdEnds = firstDue + 2 * policy.renewEvery().toNanos() + policy.renewalDeadline().toNanos();
        assertFalse(policy.lapsed(confirmed, thirdEnds - 1), "lapsed before the third renewal ended");
        assertTrue(policy.lapsed(confirmed, confirmed + t));
        // A claim is extended only while the statement extending it has T/4 left before the claim could go stale.
        assertTrue(policy.extendableFor().toNanos() <= t - t / 4);
        // A renewal due on time finds the row well inside what may be extended, even after a full deadline.
        assertTrue(policy.renewEvery().plus(policy.renewalDeadline()).compareTo(policy.extendableFor()) < 0);
        // A write trusts its last confirmation only while it is younger than what may still be extended.
        assertTrue(policy.writeWithoutConfirmWithin().compareTo(policy.extendableFor()) < 0);
        assertTrue(policy.reuseKeptWithin().compareTo(policy.extendableFor()) < 0);
        // A waiting claim is made afresh before it could be taken for stale.
        assertTrue(policy.reclaimAfter().compareTo(policy.staleAfter()) < 0);
        // Live claims are found among the rows read: a lease renews at least every T.
        assertTrue(policy.claimsReadWindow().compareTo(policy.staleAfter().multipliedBy(2)) > 0);
    }
}
