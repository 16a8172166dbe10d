package io.github.chstate.bridge.store;

import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;

import java.time.Duration;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A per-state-id lock made of inserts into a plain MergeTree table ({@link Tables#claims}); no sleeping when free.
 *
 * <p>To acquire, a client inserts a {@code claim} row with a fresh token, then asks which live claim for the id
 * committed first; it holds the lock when that is its own. Otherwise it waits in line: it asks again every
 * {@code retry} until its claim is first, re-claiming (release the old claim, insert a new one) before its claim could
 * grow stale, and withdrawing it when it gives up. To release, the holder inserts a {@code release} row. A claim is
 * live while it has no release row and is younger than {@code staleAfter} (checked in the query, on the server's
 * clock). Uncontended, that is two statements to acquire and one to release, and no sleeping.
 *
 * <p>Why two clients never both hold it: on a single node, a MergeTree insert gets its block number when it is
 * committed, under the table's parts lock, in commit order, and becomes visible in that same step
 * ({@code enable_block_number_column} keeps the number through merges as {@code _block_number}). Say claims X and Y
 * are both live and X committed first. Y reads only after Y committed, so Y sees X, which is earlier: Y does not win.
 * So at most one live claim sees itself first. X stops being live only by its release (inserted after its holder is
 * done, or when a waiter withdraws) or by growing stale: a holder must finish within {@code staleAfter}, after which
 * another may take over — that is what makes a dead holder harmless. On replicated tables block numbers come from
 * Keeper before commit, so this argument does not hold there: clusters need another lock (see the README).
 */
public final class ClaimLock {
    private final ClickHouse ch;
    private final Tables tables;
    private final Duration staleAfter;
    private final Map<String, String> held = new ConcurrentHashMap<>();

    public ClaimLock(ClickHouse ch, Tables tables, Duration staleAfter) {
        this.ch = ch;
        this.tables = tables;
        this.staleAfter = staleAfter;
    }

    /** Returns the token that releases the lock, or throws LOCK_NOT_ACQUIRED when {@code wait} has passed. */
    public String acquire(String stateId, Duration retry, Duration wait) {
        long start = System.nanoTime();
        long deadline = start + wait.toNanos();
        // Re-claim well before the claim could be taken for stale while it waits in line.
        long reclaimAfter = staleAfter.toNanos() / 2;
        String token = claim(stateId);
        long claimedAt = start;
        while (!token.equals(firstLiveClaim(stateId))) {
            long now = System.nanoTime();
            if (now + retry.toNanos() > deadline) {
                insert(stateId, token, "release");
                throw new BridgeException(ErrorCode.LOCK_NOT_ACQUIRED, "State id '" + stateId + "' is locked by another "
                        + "process and was not released within " + wait.toMillis() / 1000.0 + " s. If no other Meltano "
                        + "run uses it, the lock goes stale after " + staleAfter.toMillis() / 1000.0 + " s; try again.");
            }
            sleep(retry);
            if (System.nanoTime() - claimedAt > reclaimAfter) {
                insert(stateId, token, "release");
                token = claim(stateId);
                claimedAt = System.nanoTime();
            }
        }
        held.put(token, stateId);
        return token;
    }

    public void release(String token) {
        String stateId = held.remove(token);
        if (stateId == null) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "Unknown lock token: it was never granted by this "
                    + "bridge, or it was already released.");
        }
        insert(stateId, token, "release");
    }

    private String claim(String stateId) {
        String token = UUID.randomUUID().toString();
        insert(stateId, token, "claim");
        return token;
    }

    private String firstLiveClaim(String stateId) {
        // Only rows younger than staleAfter matter (a release is never older than its claim), and the primary key
        // (state_id, at) makes reading just those cheap however many old rows the TTL has yet to remove.
        String recent = "state_id = " + Sql.literal(stateId) + " AND at > now64(3) - toIntervalMillisecond(" + staleAfter.toMillis() + ")";
        // A token's rows are its claim and, once withdrawn or released, its release: live tokens have no release.
        return ch.queryOne("SELECT token FROM " + tables.claims + " WHERE " + recent + " GROUP BY token "
                + "HAVING countIf(kind = 'release') = 0 ORDER BY min(_block_number) LIMIT 1", rs -> rs.getString(1));
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
