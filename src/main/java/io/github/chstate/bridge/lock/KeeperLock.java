package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.ServerErrors;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.error.BridgeException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * A per-state-id lock in a KeeperMap table ({@link LockTables#keeperLockStatement}): one row per state id, its value kept in
 * Keeper, written with {@code keeper_map_strict_mode = 1}. Exclusive on a single node, a self-managed cluster and
 * ClickHouse Cloud alike, because Keeper, not a table's parts, decides who wins.
 *
 * <p>To acquire, a client writes its fresh token into the row with a strict {@code ALTER TABLE … UPDATE} where the
 * token is empty (released) or the lock is older than {@code staleAfter} (judged on the server's clock, in the
 * statement). Strict mode makes that update a compare-and-set on the Keeper node's version: if anyone changed the
 * row between the server's read and its write, the statement fails ("Bad version") and changes nothing. Since an
 * UPDATE does not report whether it matched, the client then reads the owner back: it holds the lock exactly when
 * the row has its token. Where there is no row yet, a strict INSERT creates it, which Keeper runs as a create that
 * fails ("Node exists") if another client created it first. A waiter marks the row {@code wanted} on a failed try
 * (unless it is marked since it was taken), and retries every {@code retry}.
 *
 * <p>Why two clients never both hold it: every change of the row is a Keeper write, serialized by Keeper. A token is
 * written only by a create (the row did not exist) or by a compare-and-set that saw the row free or stale; a token
 * stays in the row until its holder frees it or it grows stale. So while X's token is in the row and not stale, no
 * other token can be written. The row is never deleted — release empties the token — so versions only grow, and a
 * stale holder's late release ({@code WHERE token = mine}, strict) can never free a newer holder's lock (no ABA: a
 * delete and re-create would restart the version at 0). A holder must finish within {@code staleAfter}, as with
 * {@link ClaimLock}; servers of a cluster must agree on the time to well within it (NTP).
 *
 * <p>A statement lost with its connection (the driver may even have re-sent it) is resolved by reading the owner
 * back: a re-sent update finds its own token and changes nothing, a re-sent create fails with "Node exists", and the
 * read-back then shows our token. If even the read-back fails, the error goes to the caller, and a lock written
 * meanwhile goes stale after {@code staleAfter}.
 */
public final class KeeperLock extends KeepingLock {
    private static final Logger log = LoggerFactory.getLogger(KeeperLock.class);
    private static final String STRICT = " SETTINGS keeper_map_strict_mode = 1";
    /** How much longer than one retry a holder that yielded leaves the free row to the waiter. */
    private static final Duration YIELD_AT_MOST = Duration.ofSeconds(1);
    /** How often a strict update that lost a race with another change of the row is sent again. */
    private static final int CONFLICT_TRIES = 5;

    public KeeperLock(ClickHouse ch, LockTables tables, LeasePolicy policy) {
        super(ch, tables, policy);
    }

    @Override
    protected Grant take(String stateId, Supplier<String> tokens, Run run, Duration retry, Duration wait, long start,
                         boolean justYielded, Consumer<String> onHolder) {
        long deadline = start + wait.toNanos();
        String token = tokens.get();
        if (justYielded) {
            letTheWaiterIn(stateId, retry);
        }
        while (true) {
            long takenAt = clock.nanos();
            String owner = tryTake(stateId, token);
            if (token.equals(owner)) {
                return new Grant(stateId, token, run, takenAt, false, takenAt);
            }
            markWanted(stateId);
            if (owner != null && !owner.isEmpty()) {
                onHolder.accept(owner);
            }
            if (clock.nanos() + retry.toNanos() > deadline) {
                throw gaveUp(stateId, wait, owner);
            }
            sleep(retry);
        }
    }

    /**
     * After freeing the lock for a waiter, stays off the free row until the waiter has taken it: its tries are
     * {@code retry} plus a few statements apart, so trying at our own pace would often win the race. A waiter that
     * does not come within {@link #YIELD_AT_MOST} (it gave up or died) no longer holds us back.
     */
    private void letTheWaiterIn(String stateId, Duration retry) {
        markWanted(stateId); // then we are the one waiting, and the waiter will yield to us in turn
        long until = clock.nanos() + retry.plus(YIELD_AT_MOST).toNanos();
        do {
            sleep(retry);
        } while ("".equals(owner(stateId, null)) && clock.nanos() < until);
    }

    /**
     * Takes the row over where it is free or stale, then answers who holds it ('' for nobody, null without a row);
     * creates it where it does not exist yet. The update comes first because the row exists for every run but a
     * state id's first.
     */
    private String tryTake(String stateId, String token) {
        String id = Sql.literal(stateId);
        BridgeException lost = null;
        try {
            ch.execute("ALTER TABLE " + tables.keeperLock + " UPDATE token = " + Sql.literal(token)
                    + ", at = now64(3) WHERE state_id = " + id + " AND (token = '' OR at < now64(3) - toIntervalMillisecond("
                    + staleAfter.toMillis() + "))" + STRICT);
        } catch (BridgeException e) {
            if (!ServerErrors.isKeeperConflict(e)) { // a conflict: someone else changed the row first
                log.debug("Taking the lock on '{}' failed ({}); reading back who holds it.", stateId, e.getMessage());
                lost = e;
            }
        }
        String owner = owner(stateId, lost);
        if (owner != null) {
            return owner;
        }
        try {
            ch.execute("INSERT INTO " + tables.keeperLock + " (state_id, token)" + STRICT + " VALUES (" + id + ", "
                    + Sql.literal(token) + ")");
            return token;
        } catch (BridgeException e) {
            // "Node exists": created by another meanwhile, or by this very insert, re-sent after a lost connection
            return owner(stateId, ServerErrors.isKeeperConflict(e) ? null : e);
        }
    }

    /** The token in the row ('' when free), or null without a row; if it cannot be read, {@code lost} or this failure. */
    private String owner(String stateId, BridgeException lost) {
        try {
            return ch.queryOne("SELECT token FROM " + tables.keeperLock + " WHERE state_id = " + Sql.literal(stateId),
                    rs -> rs.getString(1));
        } catch (BridgeException e) {
            throw lost != null ? lost : e;
        }
    }

    /** Tells the holder, at its next check, that someone waits: it then frees the lock instead of keeping it. */
    private void markWanted(String stateId) {
        // Strict too: a plain update writes back the whole row as it read it, and could undo a concurrent change of
        // the token. If the row changed meanwhile, this mark is dropped; the next try marks again. A row marked since
        // it was taken is left alone: every write to the row makes the holder's free of it conflict and try again.
        try {
            ch.execute("ALTER TABLE " + tables.keeperLock + " UPDATE wanted = now64(3) WHERE state_id = "
                    + Sql.literal(stateId) + " AND wanted < at" + STRICT);
        } catch (BridgeException e) {
            if (!ServerErrors.isKeeperConflict(e)) {
                throw e;
            }
        }
    }

    @Override
    protected boolean nobodyWaits(Grant kept) {
        return Boolean.TRUE.equals(ch.queryOne("SELECT token = " + Sql.literal(kept.token) + " AND wanted < at FROM "
                + tables.keeperLock + " WHERE state_id = " + Sql.literal(kept.stateId), rs -> rs.getBoolean(1)));
    }

    @Override
    protected void free(String stateId, String token) {
        for (int tries = 1; ; tries++) {
            try {
                ch.execute("ALTER TABLE " + tables.keeperLock + " UPDATE token = '' WHERE state_id = "
                        + Sql.literal(stateId) + " AND token = " + Sql.literal(token) + STRICT);
                return;
            } catch (BridgeException e) {
                if (!ServerErrors.isKeeperConflict(e)) {
                    throw e;
                }
                // The row changed between the server's read and write: a waiter marked it wanted (our token is still
                // there: free it again), or took it over after our lock went stale (nothing of ours left to free).
                if (!token.equals(owner(stateId, null))) {
                    return;
                }
                if (tries == CONFLICT_TRIES) {
                    throw e;
                }
            }
        }
    }

    /**
     * Moves the row's time on while it has our token: a compare-and-set, so it never extends another's lock; then
     * reads who holds the row and how old its time is.
     */
    @Override
    protected Renewal renew(Grant grant) {
        for (int tries = 1; ; tries++) {
            try {
                ch.execute("ALTER TABLE " + tables.keeperLock + " UPDATE at = now64(3) WHERE state_id = "
                        + Sql.literal(grant.stateId) + " AND token = " + Sql.literal(grant.row) + STRICT);
                break;
            } catch (BridgeException e) {
                if (!ServerErrors.isKeeperConflict(e) || tries == CONFLICT_TRIES) {
                    throw e; // the caller tries again later, or fails the write it was for
                }
            }
        }
        long readAt = clock.nanos();
        Renewal seen = ch.queryOne("SELECT token, toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(at) FROM "
                + tables.keeperLock + " WHERE state_id = " + Sql.literal(grant.stateId), rs -> grant.row.equals(
                rs.getString(1)) ? Renewal.ours(readAt, rs.getLong(2)) : Renewal.heldBy(rs.getString(1)));
        return seen != null ? seen : Renewal.heldBy("");
    }

    /** Empties the row if it still has that token; a forced run then takes it as a free row. */
    @Override
    protected void evict(String stateId, String token) {
        free(stateId, token);
    }

    @Override
    protected String holds(String stateId, String row) {
        return "(SELECT count() FROM " + tables.keeperLock + " WHERE state_id = " + Sql.literal(stateId) + " AND token = "
                + Sql.literal(row) + ") = 1";
    }

    @Override
    protected Duration renewedAgo(String stateId, String token) {
        Long ago = ch.queryOne("SELECT toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(at) FROM "
                + tables.keeperLock + " WHERE state_id = " + Sql.literal(stateId) + " AND token = " + Sql.literal(token),
                rs -> rs.getLong(1));
        return ago == null ? null : Duration.ofMillis(ago);
    }

    @Override
    protected List<LiveLease> liveLeases() {
        return ch.query("SELECT state_id, token, toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(at) FROM "
                + tables.keeperLock + " WHERE startsWith(token, '{') AND at > now64(3) - toIntervalMillisecond("
                + staleAfter.toMillis() + ") ORDER BY state_id", rs -> new LiveLease(rs.getString(1), rs.getString(2),
                Duration.ofMillis(rs.getLong(3))));
    }
}
