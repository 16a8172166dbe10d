package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.Sql;

import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * A per-state-id lock made of inserts into a plain MergeTree table ({@link LockTables#claimsStatement}); no sleeping when free.
 *
 * <p>To acquire, a client inserts a {@code claim} row with a fresh token, then asks which live claim for the id
 * committed first; it holds the lock when that is its own. Otherwise it waits in line: it asks again every
 * {@code retry} until its claim is first, re-claiming (release the old claim, insert a new one) before its claim could
 * grow stale, and withdrawing it when it gives up. To release, the holder inserts a {@code release} row. A token is
 * live while it has no release row and its newest row is younger than {@code staleAfter} (checked in the query, on
 * the server's clock); a holder renews it by inserting another claim row of the same token ({@link #renew}), which
 * keeps its place: the order is that of each token's first row. Uncontended, that is two statements to acquire and one to release, and no sleeping; a release is kept
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
    public ClaimLock(ClickHouse ch, LockTables tables, LeasePolicy policy) {
        super(ch, tables, policy);
    }

    /**
     * Claims the lock and waits in line. Whatever ends the wait without the lock — a refusal, giving up, a failed
     * statement, even the claim's own insert failing after it may have landed — withdraws the claim, so that no live
     * claim of this bridge is left to hold others back for lock_timeout_seconds.
     */
    @Override
    protected Grant take(String stateId, Supplier<String> tokens, Run run, Duration retry, Duration wait, long start,
                         boolean justYielded, Consumer<String> onHolder) {
        long deadline = start + wait.toNanos();
        long claimedAt = clock.nanos(); // before the insert: the row's own time is later, so this errs on the safe side
        String mine = tokens.get();
        try {
            claim(stateId, mine);
            long checkedAt = clock.nanos();
            List<String> live = liveClaims(stateId);
            while (live.isEmpty() || !live.get(0).equals(mine)) {
                if (!live.isEmpty()) {
                    onHolder.accept(live.get(0));
                }
                if (clock.nanos() + retry.toNanos() > deadline) {
                    throw gaveUp(stateId, wait, live.isEmpty() ? "" : live.get(0));
                }
                sleep(retry);
                if (clock.nanos() - claimedAt > policy.reclaimAfter().toNanos()) {
                    free(stateId, mine);
                    claimedAt = clock.nanos();
                    mine = tokens.get();
                    claim(stateId, mine);
                }
                checkedAt = clock.nanos();
                live = liveClaims(stateId);
            }
            return new Grant(stateId, mine, run, claimedAt, live.size() > 1, checkedAt);
        } catch (RuntimeException e) {
            withdraw(stateId, mine, e);
            throw e;
        }
    }

    /** A release row for a claim this bridge gave up; if even that fails, the claim goes stale by itself. */
    private void withdraw(String stateId, String token, RuntimeException why) {
        try {
            free(stateId, token);
        } catch (RuntimeException e) {
            why.addSuppressed(e);
        }
    }

    @Override
    protected boolean nobodyWaits(Grant kept) {
        return liveClaims(kept.stateId).equals(List.of(kept.row)); // still first, and nobody behind it
    }

    @Override
    protected void free(String stateId, String token) {
        insert(stateId, token, "release");
    }

    /**
     * A renewal is another claim row of the same token, inserted only while the token's newest row is younger than
     * {@link LeasePolicy#extendableFor}: a token that may have gone stale is never made live again, which could put it
     * ahead of a claim that took over meanwhile. Then one query says who is first and how old the token's newest row
     * is, so that a renewal that could not extend the claim says so. A token that did go stale, with nobody claiming
     * since, is taken again under a new token; if anyone claimed since, it is lost (a release row, such as a forced
     * run's eviction of the token it displaced, takes nothing).
     */
    @Override
    protected Renewal renew(Grant grant) {
        String id = Sql.literal(grant.stateId);
        String row = Sql.literal(grant.row);
        ch.execute("INSERT INTO " + tables.claims + " (state_id, token, kind) SETTINGS async_insert = 0, "
                + "insert_deduplicate = 0 SELECT " + id + ", " + row + ", 'claim' FROM " + tables.claims
                + " WHERE state_id = " + id + " AND token = " + row + " HAVING countIf(kind = 'release') = 0 AND "
                + "max(at) > now64(3) - toIntervalMillisecond(" + policy.extendableFor().toMillis() + ")");
        long readAt = clock.nanos();
        List<Claim> first = ch.query(liveClaimsQuery(grant.stateId, 1), rs -> new Claim(rs.getString(1), rs.getLong(2)));
        if (!first.isEmpty()) {
            Claim holder = first.get(0);
            return holder.token.equals(grant.row) ? Renewal.ours(readAt, holder.ageMillis) : Renewal.heldBy(holder.token);
        }
        long claimedAt = clock.nanos();
        String fresh = claim(grant.stateId, grant.run != null ? grant.run.newToken(clock.wallMillis()) : UUID.randomUUID().toString());
        Long others = ch.queryOne("SELECT count() FROM " + tables.claims + " WHERE state_id = " + id + " AND token NOT "
                + "IN (" + row + ", " + Sql.literal(fresh) + ") AND kind = 'claim' AND at >= (SELECT max(at) FROM " + tables.claims
                + " WHERE state_id = " + id + " AND token = " + row + ")", rs -> rs.getLong(1));
        if (others == null || others > 0) {
            free(grant.stateId, fresh);
            return Renewal.heldBy("");
        }
        free(grant.stateId, grant.row);
        grant.row = fresh;
        return new Renewal(null, claimedAt);
    }

    /** A live claim: its token, and how long ago its newest row was written (on the server's clock). */
    private record Claim(String token, long ageMillis) {
    }

    /** Another holder's release row: its token is no longer live, whatever its age. */
    @Override
    protected void evict(String stateId, String token) {
        free(stateId, token);
    }

    @Override
    protected Duration renewedAgo(String stateId, String token) {
        Long ago = ch.queryOne("SELECT toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(max(at)) FROM "
                + tables.claims + " WHERE state_id = " + Sql.literal(stateId) + " AND token = " + Sql.literal(token)
                + " HAVING count() > 0", rs -> rs.getLong(1));
        return ago == null ? null : Duration.ofMillis(ago);
    }

    @Override
    protected List<LiveLease> liveLeases() {
        return ch.query("SELECT state_id, token, toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(max(at)) "
                + "FROM " + tables.claims + " WHERE at > now64(3) - toIntervalMillisecond(" + staleAfter.toMillis()
                + ") AND startsWith(token, '{') GROUP BY state_id, token HAVING countIf(kind = 'release') = 0 "
                + "ORDER BY state_id", rs -> new LiveLease(rs.getString(1), rs.getString(2),
                Duration.ofMillis(rs.getLong(3))));
    }

    private String claim(String stateId, String token) {
        insert(stateId, token, "claim");
        return token;
    }

    /**
     * The tokens of the first two live claims, in order of their first claim row: who holds the lock, and whether
     * anyone waits.
     */
    private List<String> liveClaims(String stateId) {
        return ch.query(liveClaimsQuery(stateId, 2), rs -> rs.getString(1));
    }

    /** The first claim is the holder's. */
    @Override
    protected String holds(String stateId, String row) {
        return "(SELECT token FROM (" + liveClaimsQuery(stateId, 1) + ")) = " + Sql.literal(row);
    }

    /**
     * The tokens of the first {@code limit} live claims, in order of their first claim row. A token is live while it
     * has no release and its newest row is younger than {@code staleAfter}.
     */
    private String liveClaimsQuery(String stateId, int limit) {
        // Only rows within claimsReadWindow: the primary key (state_id, at) makes reading just those cheap however
        // many old rows the TTL has yet to remove. The second column is the token's age.
        return "SELECT token, toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(max(at)) FROM " + tables.claims
                + " WHERE state_id = " + Sql.literal(stateId) + " AND at > now64(3) - toIntervalMillisecond("
                + policy.claimsReadWindow().toMillis() + ") GROUP BY token "
                + "HAVING countIf(kind = 'release') = 0 AND max(at) > now64(3) - toIntervalMillisecond("
                + staleAfter.toMillis() + ") ORDER BY min(_block_number) LIMIT " + limit;
    }

    private void insert(String stateId, String token, String kind) {
        ch.execute("INSERT INTO " + tables.claims + " (state_id, token, kind) SETTINGS async_insert = 0, insert_deduplicate = 0 "
                + "VALUES (" + Sql.literal(stateId) + ", " + Sql.literal(token) + ", '" + kind + "')");
    }
}
