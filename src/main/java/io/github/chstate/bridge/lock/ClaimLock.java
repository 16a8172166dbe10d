package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.Sql;

import java.time.Duration;
import java.util.List;
import java.util.UUID;

/**
 * A per-state-id lock made of inserts into a plain MergeTree table ({@link LockTables#claimsStatement}); no sleeping when free.
 *
 * <p>To acquire, a client inserts a {@code claim} row with a fresh token, then asks which live claim for the id
 * committed first; it holds the lock when that is its own. Otherwise it waits in line: it asks again every
 * {@code retry} until its claim is first, re-claiming (release the old claim, insert a new one) before its claim could
 * grow stale, and withdrawing it when it gives up. To release, the holder inserts a {@code release} row. A claim is
 * live while it has no release row and is younger than {@code staleAfter} (checked in the query, on the server's
 * clock). Uncontended, that is two statements to acquire and one to release, and no sleeping; a release is kept
 * back for a moment so that this bridge can take the same id again, mostly without a statement
 * ({@link KeepingLock#release}).
 *
 * <p>Why two clients never both hold it: on a single node, a MergeTree insert gets its block number when it is
 * committed, under the table's parts lock, in commit order, and becomes visible in that same step
 * ({@code enable_block_number_column} keeps the number through merges as {@code _block_number}). Say claims X and Y
 * are both live and X committed first. Y reads only after Y committed, so Y sees X, which is earlier: Y does not win.
 * So at most one live claim sees itself first, and it stays first while it is live: claims committed after it are
 * later. X stops being live only by its release (inserted after its holder is done, or when a waiter withdraws) or by
 * growing stale: a holder must finish within {@code staleAfter}, after which another may take over — that is what
 * makes a dead holder harmless. On replicated tables block numbers come from Keeper before commit, so this argument
 * does not hold there: clusters need {@link KeeperLock}.
 */
public final class ClaimLock extends KeepingLock {
    public ClaimLock(ClickHouse ch, LockTables tables, Duration staleAfter) {
        super(ch, tables, staleAfter);
    }

    @Override
    protected Grant take(String stateId, Duration retry, Duration wait, long start, boolean justYielded) {
        // Re-claim well before the claim could be taken for stale while it waits in line.
        long reclaimAfter = staleAfter.toNanos() / 2;
        long deadline = start + wait.toNanos();
        Claim mine = claim(stateId);
        long checkedAt = System.nanoTime();
        List<String> live = liveClaims(stateId);
        while (live.isEmpty() || !live.get(0).equals(mine.token)) {
            long now = System.nanoTime();
            if (now + retry.toNanos() > deadline) {
                free(stateId, mine.token);
                throw gaveUp(stateId, wait);
            }
            sleep(retry);
            if (System.nanoTime() - mine.claimedAt > reclaimAfter) {
                free(stateId, mine.token);
                mine = claim(stateId);
            }
            checkedAt = System.nanoTime();
            live = liveClaims(stateId);
        }
        return new Grant(stateId, mine.token, mine.claimedAt, live.size() > 1, checkedAt);
    }

    @Override
    protected boolean nobodyWaits(Grant kept) {
        return liveClaims(kept.stateId).equals(List.of(kept.token)); // still first, and nobody behind it
    }

    @Override
    protected void free(String stateId, String token) {
        insert(stateId, token, "release");
    }

    private record Claim(String token, long claimedAt) {
    }

    private Claim claim(String stateId) {
        String token = UUID.randomUUID().toString();
        long claimedAt = System.nanoTime(); // before the insert: the row's own time is later, so this errs on the safe side
        insert(stateId, token, "claim");
        return new Claim(token, claimedAt);
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
}
