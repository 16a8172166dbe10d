package io.github.chstate.bridge.store;

import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * A per-state-id lock made of inserts into a plain MergeTree table ({@link Tables#claims}); no sleeping when free.
 *
 * <p>To acquire, a client inserts a {@code claim} row with a fresh token, then asks which live claim for the id
 * committed first; it holds the lock when that is its own. Otherwise it waits in line: it asks again every
 * {@code retry} until its claim is first, re-claiming (release the old claim, insert a new one) before its claim could
 * grow stale, and withdrawing it when it gives up. To release, the holder inserts a {@code release} row. A claim is
 * live while it has no release row and is younger than {@code staleAfter} (checked in the query, on the server's
 * clock). Uncontended, that is two statements to acquire and one to release, and no sleeping; a release is kept
 * back for a moment so that this bridge can take the same id again, mostly without a statement (see
 * {@link #release}).
 *
 * <p>Why two clients never both hold it: on a single node, a MergeTree insert gets its block number when it is
 * committed, under the table's parts lock, in commit order, and becomes visible in that same step
 * ({@code enable_block_number_column} keeps the number through merges as {@code _block_number}). Say claims X and Y
 * are both live and X committed first. Y reads only after Y committed, so Y sees X, which is earlier: Y does not win.
 * So at most one live claim sees itself first, and it stays first while it is live: claims committed after it are
 * later. X stops being live only by its release (inserted after its holder is done, or when a waiter withdraws) or by
 * growing stale: a holder must finish within {@code staleAfter}, after which another may take over — that is what
 * makes a dead holder harmless. On replicated tables block numbers come from Keeper before commit, so this argument
 * does not hold there: clusters need another lock (see the README).
 */
public final class ClaimLock implements AutoCloseable {
    /** How long a released claim is kept for this bridge to take again; see {@link #release}. */
    public static final Duration KEPT_AFTER_RELEASE = Duration.ofMillis(250);
    /** How long a kept claim is taken again without asking the table whether others have queued behind it. */
    public static final Duration CHECK_QUEUE_AFTER = Duration.ofSeconds(1);
    private static final Logger log = LoggerFactory.getLogger(ClaimLock.class);

    /** A claim row this bridge inserted and has not released in the table yet. */
    private record Claim(String stateId, String token, long claimedAt) {
    }

    /**
     * One granting of a claim, and whether others were in line behind it when the table was last asked. Compared by
     * identity, so that the timer of an earlier keeping leaves a later one alone.
     */
    private static final class Grant {
        final Claim claim;
        final boolean othersWaiting;
        final long checkedAt;

        Grant(Claim claim, boolean othersWaiting, long checkedAt) {
            this.claim = claim;
            this.othersWaiting = othersWaiting;
            this.checkedAt = checkedAt;
        }
    }

    private final ClickHouse ch;
    private final Tables tables;
    private final Duration staleAfter;
    private final Map<String, Grant> held = new ConcurrentHashMap<>(); // by token
    private final Map<String, Grant> kept = new ConcurrentHashMap<>(); // by state id: released by the caller only
    private final ScheduledExecutorService releaser = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "lock-releaser");
        t.setDaemon(true);
        return t;
    });

    public ClaimLock(ClickHouse ch, Tables tables, Duration staleAfter) {
        this.ch = ch;
        this.tables = tables;
        this.staleAfter = staleAfter;
    }

    /** Returns the token that releases the lock, or throws LOCK_NOT_ACQUIRED when {@code wait} has passed. */
    public String acquire(String stateId, Duration retry, Duration wait) {
        long start = System.nanoTime();
        // Re-claim well before the claim could be taken for stale while it waits in line or is kept.
        long reclaimAfter = staleAfter.toNanos() / 2;
        Grant keptGrant = kept.remove(stateId);
        if (keptGrant != null) {
            Claim mine = keptGrant.claim;
            if (start - mine.claimedAt < reclaimAfter) {
                // A live claim stays first, so asking again only tells whether someone has queued since; a newcomer
                // waits at most CHECK_QUEUE_AFTER longer for not being asked about.
                if (start - keptGrant.checkedAt < CHECK_QUEUE_AFTER.toNanos()) {
                    return grant(new Grant(mine, false, keptGrant.checkedAt));
                }
                List<String> live = liveClaims(stateId);
                if (live.equals(List.of(mine.token))) { // still first, and nobody waits behind it
                    return grant(new Grant(mine, false, start));
                }
            }
            insert(stateId, mine.token, "release"); // let the one waiting go first
        }
        long deadline = start + wait.toNanos();
        Claim mine = claim(stateId);
        long checkedAt = System.nanoTime();
        List<String> live = liveClaims(stateId);
        while (live.isEmpty() || !live.get(0).equals(mine.token)) {
            long now = System.nanoTime();
            if (now + retry.toNanos() > deadline) {
                insert(stateId, mine.token, "release");
                throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "' is locked by another "
                        + "process and was not released within " + wait.toMillis() / 1000.0 + " s. If no other Meltano "
                        + "run uses it, the lock goes stale after " + staleAfter.toMillis() / 1000.0 + " s; try again.");
            }
            sleep(retry);
            if (System.nanoTime() - mine.claimedAt > reclaimAfter) {
                insert(stateId, mine.token, "release");
                mine = claim(stateId);
            }
            checkedAt = System.nanoTime();
            live = liveClaims(stateId);
        }
        return grant(new Grant(mine, live.size() > 1, checkedAt));
    }

    private String grant(Grant grant) {
        held.put(grant.claim.token, grant);
        return grant.claim.token;
    }

    /**
     * The token of this bridge's granted, not yet released claim on the id, or null. While one token is held, nobody
     * else has held the id since it was granted: what this bridge read or wrote under it is still the newest.
     */
    public String heldToken(String stateId) {
        for (Grant grant : held.values()) {
            if (grant.claim.stateId.equals(stateId)) {
                return grant.claim.token;
            }
        }
        return null;
    }

    /**
     * When others were in line as the lock was granted, writes the release row now. Otherwise answers at once and
     * writes it {@link #KEPT_AFTER_RELEASE} later, or on {@link #close}: Meltano takes the lock once per STATE
     * message, so the next acquire of the same id usually comes from this bridge within that time, and then gets the
     * claim back without a statement (with one query, to see who queued, once per {@link #CHECK_QUEUE_AFTER}) instead
     * of three — unless another process has queued, which then goes first.
     */
    public void release(String token) {
        Grant grant = held.remove(token);
        if (grant == null) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "Unknown lock token: it was never granted by this "
                    + "bridge, or it was already released.");
        }
        if (grant.othersWaiting) {
            insert(grant.claim.stateId, token, "release");
            return;
        }
        kept.put(grant.claim.stateId, grant);
        releaser.schedule(() -> releaseKept(grant), KEPT_AFTER_RELEASE.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** Writes the release of every kept claim. */
    @Override
    public void close() {
        releaser.shutdownNow();
        kept.values().forEach(this::releaseKept);
    }

    private void releaseKept(Grant grant) {
        Claim claim = grant.claim;
        if (kept.remove(claim.stateId, grant)) {
            try {
                insert(claim.stateId, claim.token, "release");
            } catch (BridgeException e) {
                log.warn("Could not release the lock on state id '{}' ({}); it goes stale after {} s.", claim.stateId,
                        e.getMessage(), staleAfter.toMillis() / 1000.0);
            }
        }
    }

    private Claim claim(String stateId) {
        String token = UUID.randomUUID().toString();
        long claimedAt = System.nanoTime(); // before the insert: the row's own time is later, so this errs on the safe side
        insert(stateId, token, "claim");
        return new Claim(stateId, token, claimedAt);
    }

    /** The tokens of the first two live claims, in commit order: who holds the lock, and whether anyone waits. */
    private List<String> liveClaims(String stateId) {
        // Only rows younger than staleAfter matter (a release is never older than its claim), and the primary key
        // (state_id, at) makes reading just those cheap however many old rows the TTL has yet to remove.
        String recent = "state_id = " + Sql.literal(stateId) + " AND at > now64(3) - toIntervalMillisecond(" + staleAfter.toMillis() + ")";
        // A token's rows are its claim and, once withdrawn or released, its release: live tokens have no release.
        return ch.query("SELECT token FROM " + tables.claims + " WHERE " + recent + " GROUP BY token "
                + "HAVING countIf(kind = 'release') = 0 ORDER BY min(_block_number) LIMIT 2", rs -> rs.getString(1));
    }

    private void insert(String stateId, String token, String kind) {
        ch.execute("INSERT INTO " + tables.claims + " (state_id, token, kind) SETTINGS async_insert = 0, insert_deduplicate = 0 "
                + "VALUES (" + Sql.literal(stateId) + ", " + Sql.literal(token) + ", '" + kind + "')");
    }

    private static void sleep(Duration d) {
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "Interrupted while waiting for a lock.");
        }
    }
}
