package io.github.chstate.bridge.store;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.RowBinary;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.lock.Run;
import io.github.chstate.bridge.lock.StateLock;

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;
import java.util.stream.Collectors;

/**
 * Reads and writes the state table ({@link Tables}; its history: {@link StateHistory}). Reads use FINAL,
 * so they see one row per id: the one with the highest {@code updated_at}. Each write gives its rows a version above
 * every version already stored for the id, and a fresh deduplication token, so that A → B → A rewrites are never
 * dropped as duplicates, while a request sent again inserts nothing (its version is no longer above the stored one).
 *
 * <p>A version is the server's time ({@link ServerClock}), or 1 ms above the version this bridge last read or wrote
 * under the same lock if that is later; the server inserts the rows only if their version is above every version
 * stored for their ids, checked within the INSERT, so a set is one statement ({@link #insertAbove}).
 *
 * <p>Under the lock, with a write interval, a set is kept back (pending) until the interval since the id's last
 * write has passed, and a get answers with the newest state set: Meltano's run sends an INSERT a second, not one per
 * STATE message. What is pending is written before the lock is freed ({@link StateLock.BeforeFree}), before every
 * call that reads more than its own locked id or writes without the lock, and on {@link #flush}: a bookmark is
 * stored late, never lost while the bridge lives, never newer than emitted.
 *
 * <p>States go to the server as data (RowBinary), never inside SQL, and come back as text ({@link StatePart}): the
 * server need not parse a 20 MB literal, nor the bridge build and write a tree of it.
 *
 * <p>On replicated and Shared tables, reads that must see the newest write and inserts carry the settings the
 * {@link Deployment} needs for that.
 */
public final class StateStore {
    private static final String COLUMNS = "(state_id, partial_state, completed_state, updated_at)";
    private static final String STRUCTURE = "state_id String, partial_state Nullable(String), "
            + "completed_state Nullable(String), updated_at DateTime64(3)";
    private final ClickHouse ch;
    private final Tables tables;
    private final ServerClock clock;
    private final StateLock lock;
    private final Deployment deployment;
    private final ObjectMapper json;
    private final long writeIntervalNanos;

    /**
     * What this bridge knows of an id under the lock {@code token}: the newest stored version, and the newest state
     * (null until read or set), which is {@code pending} while it is set but not yet written.
     *
     * @param writtenAt when this bridge last wrote the id under the token ({@link Clock#nanos}), or null
     */
    private record Known(String token, long versionMillis, StoredState state, boolean pending, Long writtenAt) {
    }

    private final Map<String, Known> known = new ConcurrentHashMap<>();
    private final ReadAhead readAhead;
    /** Why pending states could not be written, by id: said by the next acquire of the id, or by {@link #flush()}. */
    private final Map<String, String> failedWrites = new ConcurrentHashMap<>();

    public StateStore(ClickHouse ch, Tables tables, ServerClock clock, StateLock lock, Deployment deployment,
                      ObjectMapper json, Duration writeInterval) {
        this.ch = ch;
        this.tables = tables;
        this.clock = clock;
        this.lock = lock;
        this.deployment = deployment;
        this.json = json;
        this.writeIntervalNanos = writeInterval.toNanos();
        this.readAhead = new ReadAhead(ch.clock(), this::statesFrom);
        lock.beforeFree(this::writePending);
    }

    /**
     * Under this bridge's lock and with a write interval, the newest state it knows, without a statement once it knows
     * one; else the stored state (with {@code write_interval_seconds: 0}, every time: as an unlocked write of another
     * process is seen under the lock).
     */
    public StoredState get(String stateId) {
        String token = lock.heldToken(stateId);
        Known last = known.get(stateId);
        if (token == null) {
            writeAllPending();
            return readAhead.get(stateId, () -> getStored(stateId, null));
        } else if (writeIntervalNanos > 0 && last != null && last.token.equals(token) && last.state != null) {
            return last.state;
        }
        return getStored(stateId, token);
    }

    private StoredState getStored(String stateId, String token) {
        List<StoredState> rows = ch.queryRowBinary("SELECT state_id, partial_state, completed_state, "
                + "toUnixTimestamp64Milli(updated_at) FROM " + tables.state + " FINAL WHERE state_id = "
                + Sql.literal(stateId) + deployment.readClause(), in -> {
                    StoredState state = row(in);
                    long version = RowBinary.readInt64(in);
                    if (token != null) {
                        known.put(stateId, new Known(token, version, state, false, null));
                    }
                    return state;
                });
        return rows.isEmpty() ? null : rows.get(0);
    }

    /**
     * The states of the id and those after it, for {@link ReadAhead}: at most {@link ReadAhead#ROWS} rows, cut after
     * {@link ReadAhead#BYTES} of state; the statement is the same size whatever it reads.
     */
    private List<StoredState> statesFrom(String stateId) {
        return ch.queryRowBinary("SELECT state_id, partial_state, completed_state FROM (SELECT *, sum(length(ifNull("
                + "partial_state, '')) + length(ifNull(completed_state, ''))) OVER (ORDER BY state_id ROWS BETWEEN "
                + "UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM (SELECT state_id, partial_state, completed_state "
                + "FROM " + tables.state + " FINAL WHERE state_id >= " + Sql.literal(stateId) + " ORDER BY state_id LIMIT "
                + ReadAhead.ROWS + ")) WHERE before < " + ReadAhead.BYTES + " ORDER BY state_id" + deployment.readClause(),
                this::row);
    }

    public List<StoredState> getAll(String pattern) {
        writeAllPending();
        return ch.queryRowBinary("SELECT state_id, partial_state, completed_state FROM " + tables.state + " FINAL"
                + matching(pattern) + " ORDER BY state_id" + deployment.readClause(), this::row);
    }

    public List<String> stateIds(String pattern) {
        writeAllPending();
        List<String> ids = ch.query("SELECT state_id FROM " + tables.state + " FINAL" + matching(pattern) + " ORDER BY state_id"
                + deployment.readClause(), rs -> rs.getString(1));
        readAhead.listed();
        return ids;
    }

    /**
     * Under this bridge's lock on the id: written when {@code write_interval_seconds} have passed since this bridge
     * last wrote it under the lock (at once the first time), else kept back as pending until then, or until just
     * before the lock is freed ({@link #writePending}), whichever comes first. Without the lock, as {@link #writeAll}.
     * Answers whether it was kept back.
     */
    public boolean set(StoredState state) {
        String id = state.stateId();
        String token = lock.heldToken(id);
        if (token == null) {
            writeAll(List.of(state));
            return false;
        }
        Known last = known.get(id);
        if (last != null && !last.token.equals(token)) {
            last = null;
        }
        if (last != null && last.writtenAt != null && ch.clock().nanos() - last.writtenAt < writeIntervalNanos) {
            known.put(id, new Known(token, last.versionMillis, state, true, last.writtenAt));
            return true;
        }
        write(state, token, last == null ? 0 : last.versionMillis);
        return false;
    }

    /**
     * An import: writes all states in one INSERT, with one version above every stored one ({@link #insertAbove}),
     * unless a live run of another process holds one of their ids; then writes none, naming the run (its next write
     * would go above the imported state, or the import would land under it). Checked as the import starts.
     */
    public int setAll(Collection<StoredState> states) {
        Set<String> ids = new HashSet<>();
        states.forEach(s -> ids.add(s.stateId()));
        List<StateLock.LiveLease> running = lock.runs().stream()
                .filter(l -> ids.contains(l.stateId()) && lock.heldToken(l.stateId()) == null).toList();
        if (!running.isEmpty()) {
            StateLock.LiveLease first = running.get(0);
            Run.Holder run = Run.holder(first.token());
            throw new BridgeException(ErrorCode.RUN_IN_PROGRESS, "Nothing was imported: state id '" + first.stateId()
                    + "' is held by the run " + (run == null ? "of another process" : run.describe())
                    + (running.size() > 1 ? " (and " + (running.size() - 1) + " more ids by live runs)" : "")
                    + ". Import once the run has ended, or leave its state id out.");
        }
        return writeAll(states);
    }

    /** Writes all states in one INSERT, with one version above every stored one ({@link #insertAbove}). */
    private int writeAll(Collection<StoredState> states) {
        Map<String, StoredState> byId = new LinkedHashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s)); // for an id given twice the last one counts
        if (byId.isEmpty()) {
            return 0;
        }
        writeAllPending();
        known.keySet().removeAll(byId.keySet());
        insertAbove(byId.values(), 0, null);
        return byId.size();
    }

    /** Writes the state at once under the lock {@code token}, with a version above every stored one. */
    void writeUnderLock(StoredState state, String token) {
        write(state, token, 0);
    }

    /**
     * Writes the state under the lock {@code token}, with a version above {@code newestKnown} (0: none known) and
     * every stored one ({@link #insertAbove}).
     */
    private synchronized void write(StoredState state, String token, long newestKnown) {
        long startedAt = ch.clock().nanos();
        long version = insertAbove(List.of(state), newestKnown, token);
        known.put(state.stateId(), new Known(token, version, state, false, startedAt));
        failedWrites.remove(state.stateId()); // written after all: nothing to say
    }

    /**
     * The newest version stored in the scope of a write, and whether its rows are there: as many rows of the version
     * tried as it has (a write of others in the same millisecond makes it try again above: a version more, none lost).
     */
    private record Stored(long newest, boolean landed) {
    }

    /**
     * Inserts the states with one version, the later of the server's time and {@code newestKnown} + 1 ms, answering
     * it. The server inserts the rows only if that version is above every one stored in their scope — the id's
     * versions for one state; every version in the table for more, so that the statement is the same size for
     * 100,000 ids as for two (the ids travel only in the body) and the rows land all or none — and, with a lock
     * {@code token}, only if the lock is still this bridge's as the rows arrive ({@link StateLock#heldCondition}): a
     * write that was on its way while this bridge was paused or cut off, and lost its lock meanwhile, is dropped. Every
     * try under a lock is sent only while the lock is surely still this bridge's ({@link StateLock#requireOwn}).
     *
     * <p>A refused try is followed by one query. The rows are stored after all (a re-sent try that had landed, dropped
     * as a duplicate): done. A newer version is stored: tried again above it. Else, under a lock, the lock was not
     * this bridge's as the rows arrived: throws if it is not now; if it is, the claims lock may have taken it again
     * under a new claim, and the next try carries that one. Three refused tries are an error; nothing was written.
     */
    private long insertAbove(Collection<StoredState> states, long newestKnown, String token) {
        try {
            return insertAboveStored(states, newestKnown, token);
        } finally {
            readAhead.forget(); // once the rows may be there
        }
    }

    private long insertAboveStored(Collection<StoredState> states, long newestKnown, String token) {
        String only = states.size() == 1 ? Sql.literal(states.iterator().next().stateId()) : null;
        String scope = only == null ? "" : " WHERE state_id = " + only;
        String what = only == null ? "the " + states.size() + " states" : "the state of " + only;
        Supplier<String> target = () -> {
            String held = "";
            if (token != null) {
                lock.requireOwn(token);
                held = " AND " + lock.heldCondition(token);
            }
            return tables.state + " " + COLUMNS + " SELECT * FROM input(" + Sql.literal(STRUCTURE) + ") WHERE "
                    + "updated_at > (SELECT max(updated_at) FROM " + tables.state + scope + ")" + held;
        };
        long version = Math.max(clock.nowMillis(), newestKnown + 1);
        for (int tries = 1; insert(states, version, target) == 0; tries++) {
            if (token != null) {
                lock.confirmOwn(token);
            }
            long tried = version;
            Stored stored = ch.queryOne("SELECT toUnixTimestamp64Milli(max(updated_at)), countIf(updated_at = "
                    + "fromUnixTimestamp64Milli(" + tried + ")) FROM " + tables.state + scope + deployment.readClause(),
                    rs -> new Stored(rs.getLong(1), rs.getLong(2) == states.size()));
            if (stored.landed) {
                break;
            }
            if (tries == 3) {
                throw new BridgeException(ErrorCode.CLICKHOUSE, "ClickHouse refused " + what + " 3 times"
                        + (token == null ? "" : " although the lock reads as this bridge's") + " (newest stored version "
                        + Versions.format(stored.newest) + ", last tried " + Versions.format(tried) + "): nothing was "
                        + "written; the stored state is the one before. Run the command again.");
            }
            version = Math.max(version, Math.max(clock.nowMillis(), stored.newest + 1));
        }
        return version;
    }

    /**
     * Before the lock is freed: writes the state kept back under it, and forgets what is known under it. A state that
     * could not be written for a passing reason stays pending, for the lock's next try ({@link StateLock.BeforeFree}).
     */
    private synchronized void writePending(String stateId, String token) {
        Known last = known.get(stateId);
        if (last == null || !last.token.equals(token)) {
            return;
        }
        try {
            writeIfPending(stateId, last);
        } catch (BridgeException e) {
            forgetIfLost(stateId, last, e);
            throw e;
        }
        known.computeIfPresent(stateId, (id, k) -> k.token.equals(token) ? null : k);
    }

    /**
     * Writes every pending state, keeping the locks, all within one retry budget. Throws what could not be written (said now, so not again by
     * {@link #requireWritten}): a call that reads or writes more than its own locked id never answers as if it had
     * been. What failed stays pending for the next try, unless its lock is lost.
     */
    synchronized void writeAllPending() {
        Map<String, BridgeException> failures = new TreeMap<>();
        ch.withinOneBudget(() -> {
            known.forEach((stateId, last) -> {
                try {
                    writeIfPending(stateId, last);
                } catch (BridgeException e) {
                    forgetIfLost(stateId, last, e);
                    failures.put(stateId, e);
                }
            });
            return null;
        });
        if (!failures.isEmpty()) {
            failedWrites.keySet().removeAll(failures.keySet());
            BridgeException first = failures.values().iterator().next();
            throw new BridgeException(first.code(), failures.values().stream().map(Throwable::getMessage)
                    .collect(Collectors.joining(" ")), first);
        }
    }

    /** After a failed write: a state whose lock is lost is never written; any other stays pending. */
    private void forgetIfLost(String stateId, Known last, BridgeException failure) {
        if (failure.code() == ErrorCode.LOCK_LOST) {
            known.remove(stateId, last);
        }
    }

    /**
     * Writes the state if it is pending. If that fails, remembers that the newest state of the id was not written, and
     * why, and throws that.
     */
    private void writeIfPending(String stateId, Known last) {
        if (!last.pending) {
            return;
        }
        try {
            write(last.state, last.token, last.versionMillis);
        } catch (BridgeException e) {
            String message = "The newest state of '" + stateId + "' could not be written to ClickHouse: "
                    + e.getMessage() +  " The stored bookmark is an older one: the next run resumes from it and reads "
                    + "again what came after.";
            failedWrites.put(stateId, message);
            throw new BridgeException(e.code(), message, e);
        }
    }

    /** Before this bridge takes the id's lock: throws the failure of a pending write of it not said yet. */
    public void requireWritten(String stateId) {
        String failure = failedWrites.remove(stateId);
        if (failure != null) {
            Known last = known.get(stateId);
            throw new BridgeException(ErrorCode.CLICKHOUSE, failure + (last != null && last.pending ? " This bridge "
                    + "tries again to write it, before the lock is freed, while the lock stays its own." : ""));
        }
    }

    /**
     * At the end of a command: writes every pending state, keeping the locks; then throws what could not be written
     * and was not said yet. What could not be written now is not tried again: the command says it was not written.
     */
    public synchronized void flush() {
        List<String> failures = new ArrayList<>();
        try {
            writeAllPending();
        } catch (BridgeException e) {
            failures.add(e.getMessage());
        }
        known.values().removeIf(Known::pending);
        failures.addAll(new TreeMap<>(failedWrites).values());
        failedWrites.clear();
        if (!failures.isEmpty()) {
            throw new BridgeException(ErrorCode.CLICKHOUSE, String.join(" ", failures));
        }
    }

    /** When each of the ids was last written (its newest version, UTC), for those that have a state. */
    public Map<String, String> lastWritten(Collection<String> stateIds) {
        Map<String, String> written = new LinkedHashMap<>();
        if (stateIds.isEmpty()) {
            return written;
        }
        String ids = stateIds.stream().map(Sql::literal).collect(Collectors.joining(", "));
        ch.query("SELECT state_id, toString(max(updated_at), 'UTC') FROM " + tables.state + " WHERE state_id IN (" + ids
                + ") GROUP BY state_id" + deployment.readClause(), rs -> written.put(rs.getString(1), rs.getString(2)));
        return written;
    }

    /**
     * The states as data (RowBinary), not SQL. A fresh deduplication token: where the table deduplicates (replicated,
     * Shared), a request sent again is dropped as a duplicate, while an A → B → A rewrite is not.
     */
    private long insert(Collection<StoredState> states, long versionMillis, Supplier<String> target) {
        Map<String, String> settings = new LinkedHashMap<>(deployment.insertSettings());
        settings.put("async_insert", "0");
        settings.put("insert_deduplicate", "1");
        settings.put("insert_deduplication_token", UUID.randomUUID().toString());
        return ch.insert(target, settings, out -> {
            for (StoredState s : states) {
                RowBinary.string(out, s.stateId());
                RowBinary.nullableBytes(out, s.partial().stored());
                RowBinary.nullableBytes(out, s.completed().stored());
                RowBinary.dateTime64Millis(out, versionMillis);
            }
        });
    }

    /**
     * Deletes the id's state. Under this bridge's lock it is fenced as a write is ({@link #insertAbove}): each try is
     * sent only while the lock is surely still this bridge's, and on a single node the server deletes only while the
     * lock is ({@link StateLock#heldCondition} in the DELETE). A state still there afterwards was not deleted because
     * the lock was not this bridge's: LOCK_LOST, naming who took it, and the state stays.
     */
    public void delete(String stateId) {
        try {
            deleteStored(stateId);
        } finally {
            readAhead.forget();
        }
    }

    private void deleteStored(String stateId) {
        String token = lock.heldToken(stateId);
        writeAllPending();
        known.remove(stateId);
        String delete = "DELETE FROM " + tables.state + " WHERE state_id = " + Sql.literal(stateId);
        if (token == null) {
            ch.execute(delete);
            return;
        }
        ch.execute(() -> {
            lock.requireOwn(token);
            // Replicated tables would run the condition's subquery again on each replica: only the bridge checks there.
            return deployment.replicated() ? delete : delete + " AND " + lock.heldCondition(token);
        });
        Long left = ch.queryOne("SELECT count() FROM " + tables.state + " WHERE state_id = " + Sql.literal(stateId)
                + deployment.readClause(), rs -> rs.getLong(1));
        if (left != null && left > 0) {
            lock.confirmOwn(token);
            throw new BridgeException(ErrorCode.CLICKHOUSE, "The state of '" + stateId + "' was not deleted although "
                    + "the lock on it reads as this bridge's; it is stored as it was. Run the command again.");
        }
    }

    /** Removes every state; answers how many ids there were. */
    public long clearAll() {
        writeAllPending();
        Long count = ch.queryOne("SELECT count() FROM " + tables.state + " FINAL" + deployment.readClause(),
                rs -> rs.getLong(1));
        known.clear();
        try {
            ch.execute("TRUNCATE TABLE " + tables.state);
        } finally {
            readAhead.forget();
        }
        return count == null ? 0 : count;
    }

    private static String matching(String pattern) {
        return pattern == null || pattern.equals("*") ? "" : " WHERE match(state_id, " + Sql.literal(Sql.globRegex(pattern)) + ")";
    }

    private StoredState row(InputStream in) throws IOException {
        String id = RowBinary.readString(in);
        return new StoredState(id, part(id, RowBinary.readNullableBytes(in)), part(id, RowBinary.readNullableBytes(in)));
    }

    StatePart part(String stateId, byte[] stored) {
        StatePart part;
        try {
            part = StatePart.ofStored(stored, json.getFactory());
        } catch (IOException e) {
            part = null;
        }
        if (part == null) {
            throw new BridgeException(ErrorCode.CLICKHOUSE, "The stored state of '" + stateId + "' in " + tables.schema
                    + " is not a JSON object; fix or delete that row (meltano state clear '" + stateId + "').");
        }
        return part;
    }
}
