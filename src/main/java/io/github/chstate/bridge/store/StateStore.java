package io.github.chstate.bridge.store;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;

/**
 * Reads and writes the state table, and reads the history the server keeps of it ({@link Tables}). Reads use FINAL,
 * so they see one row per id: the one with the highest {@code updated_at}. Each write gives its rows a version above
 * every version already stored for the id, and a fresh deduplication token, so that A → B → A rewrites are never
 * dropped as duplicates, while a request the driver re-sends is.
 *
 * <p>A version is the later of the server's time ({@link ServerClock}) and the newest stored version of the id plus
 * 1 ms. Without the lock, the newest is read first, in one query for all ids of the write. Under the lock (Meltano's
 * update: get, merge, set) nobody else writes the id, so the version this bridge last read or wrote under the same
 * lock is still the newest, and the set is one statement: the INSERT.
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
    private static final List<String> COLUMNS = List.of("state_id", "partial_state", "completed_state", "updated_at");
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
     * @param writtenAt when this bridge last wrote the id under the token (System.nanoTime), or null
     */
    private record Known(String token, long versionMillis, StoredState state, boolean pending, Long writtenAt) {
    }

    private final Map<String, Known> known = new ConcurrentHashMap<>();
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
        } else if (writeIntervalNanos > 0 && last != null && last.token.equals(token) && last.state != null) {
            return last.state;
        }
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

    public List<StoredState> getAll(String pattern) {
        writeAllPending();
        return ch.queryRowBinary("SELECT state_id, partial_state, completed_state FROM " + tables.state + " FINAL"
                + matching(pattern) + " ORDER BY state_id" + deployment.readClause(), this::row);
    }

    public List<String> stateIds(String pattern) {
        writeAllPending();
        return ch.query("SELECT state_id FROM " + tables.state + " FINAL" + matching(pattern) + " ORDER BY state_id"
                + deployment.readClause(), rs -> rs.getString(1));
    }

    /**
     * Under this bridge's lock on the id: written when {@code write_interval_seconds} have passed since this bridge
     * last wrote it under the lock (at once the first time), else kept back as pending until then, or until just
     * before the lock is freed ({@link #writePending}), whichever comes first. Without the lock, as {@link #setAll}.
     */
    public void set(StoredState state) {
        String id = state.stateId();
        String token = lock.heldToken(id);
        if (token == null) {
            setAll(List.of(state));
            return;
        }
        Known last = known.get(id);
        if (last != null && !last.token.equals(token)) {
            last = null;
        }
        if (last != null && last.writtenAt != null && System.nanoTime() - last.writtenAt < writeIntervalNanos) {
            known.put(id, new Known(token, last.versionMillis, state, true, last.writtenAt));
            return;
        }
        write(state, token, last == null ? newestVersion(List.of(id)) : last.versionMillis);
    }

    /** Writes all states in one INSERT, with one version above the newest stored one of any of their ids. */
    public int setAll(Collection<StoredState> states) {
        Map<String, StoredState> byId = new LinkedHashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s)); // for an id given twice the last one counts
        if (byId.isEmpty()) {
            return 0;
        }
        writeAllPending();
        known.keySet().removeAll(byId.keySet());
        insert(byId.values(), Math.max(clock.nowMillis(), newestVersion(byId.keySet()) + 1));
        return byId.size();
    }

    /** Writes the state under the lock {@code token}, with a version above {@code newest}. */
    private synchronized void write(StoredState state, String token, long newest) {
        long version = Math.max(clock.nowMillis(), newest + 1);
        long startedAt = System.nanoTime();
        insert(List.of(state), version);
        known.put(state.stateId(), new Known(token, version, state, false, startedAt));
    }

    /** Before the lock is freed: writes the state kept back under it, and forgets what is known under it. */
    private synchronized void writePending(String stateId, String token) {
        Known last = known.get(stateId);
        if (last == null || !last.token.equals(token)) {
            return;
        }
        try {
            writeIfPending(stateId, last);
        } finally {
            known.computeIfPresent(stateId, (id, k) -> k.token.equals(token) ? null : k);
        }
    }

    /** Writes every pending state, keeping the locks; failures are kept for {@link #flush} and {@link #requireWritten}. */
    private synchronized void writeAllPending() {
        known.forEach((stateId, last) -> {
            try {
                writeIfPending(stateId, last);
            } catch (BridgeException e) {
                known.remove(stateId, last);
            }
        });
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
                    + e.getMessage() + " The stored bookmark is an older one: the next run resumes from it and reads "
                    + "again what came after.";
            failedWrites.put(stateId, message);
            throw new BridgeException(e.code(), message, e);
        }
    }

    /** Before this bridge takes the id's lock: throws the failure of a pending write of it not said yet. */
    public void requireWritten(String stateId) {
        String failure = failedWrites.remove(stateId);
        if (failure != null) {
            throw new BridgeException(ErrorCode.CLICKHOUSE, failure);
        }
    }

    /** Writes every pending state, keeping the locks; then throws what could not be written and was not said yet. */
    public void flush() {
        writeAllPending();
        if (!failedWrites.isEmpty()) {
            List<String> failures = new ArrayList<>(new TreeMap<>(failedWrites).values());
            failedWrites.clear();
            throw new BridgeException(ErrorCode.CLICKHOUSE, String.join(" ", failures));
        }
    }

    /** The newest version stored for any of the ids, in milliseconds; 0 if none. */
    private long newestVersion(Collection<String> stateIds) {
        String ids = stateIds.stream().map(Sql::literal).collect(Collectors.joining(", "));
        Long newest = ch.queryOne("SELECT toUnixTimestamp64Milli(max(updated_at)) FROM " + tables.state
                + " WHERE state_id IN (" + ids + ")" + deployment.readClause(), rs -> rs.getLong(1));
        return newest == null ? 0 : newest;
    }

    /**
     * The states as data (RowBinary), not SQL. A fresh deduplication token: a request the driver re-sends is dropped
     * as a duplicate, while an A → B → A rewrite is not.
     */
    private void insert(Collection<StoredState> states, long versionMillis) {
        Map<String, String> settings = new LinkedHashMap<>(deployment.insertSettings());
        settings.put("async_insert", "0");
        settings.put("insert_deduplicate", "1");
        settings.put("insert_deduplication_token", UUID.randomUUID().toString());
        ch.insert(tables.state, COLUMNS, settings, out -> {
            for (StoredState s : states) {
                RowBinary.string(out, s.stateId());
                RowBinary.nullableBytes(out, s.partial().stored());
                RowBinary.nullableBytes(out, s.completed().stored());
                RowBinary.dateTime64Millis(out, versionMillis);
            }
        });
    }

    /** The newest {@code limit} versions of the id in the history table, newest first. */
    public List<StateVersion> history(String stateId, int limit) {
        writeAllPending();
        return versions(stateId, historyRows(stateId, limit, Long.MAX_VALUE), limit);
    }

    /** A row of the history table. */
    private record HistoryRow(long version, byte[] partial, byte[] completed) {
    }

    /** The newest {@code limit} rows at or before {@code atMostMillis}, and one more: what the oldest of them changed. */
    private List<HistoryRow> historyRows(String stateId, int limit, long atMostMillis) {
        requireHistory();
        return ch.queryRowBinary("SELECT toUnixTimestamp64Milli(updated_at), partial_state, completed_state FROM "
                + tables.history + " WHERE state_id = " + Sql.literal(stateId) + (atMostMillis == Long.MAX_VALUE ? ""
                : " AND updated_at <= fromUnixTimestamp64Milli(" + atMostMillis + ")") + " ORDER BY updated_at DESC LIMIT "
                + (limit + 1) + deployment.readClause(),
                in -> new HistoryRow(RowBinary.readInt64(in), RowBinary.readNullableBytes(in), RowBinary.readNullableBytes(in)));
    }

    /** The first {@code limit} rows as versions, each compared with the row after it (the one before in time). */
    private List<StateVersion> versions(String stateId, List<HistoryRow> rows, int limit) {
        List<StateVersion> versions = new ArrayList<>();
        for (int i = 0; i < Math.min(limit, rows.size()); i++) {
            HistoryRow row = rows.get(i);
            Map<String, JsonNode> marks = bookmarks(stateId, row.partial, row.completed);
            Map<String, JsonNode> before = i + 1 < rows.size() ? bookmarks(stateId, rows.get(i + 1).partial, rows.get(i + 1).completed) : Map.of();
            Set<String> changed = new TreeSet<>();
            for (String name : union(marks.keySet(), before.keySet())) {
                if (!Objects.equals(marks.get(name), before.get(name))) {
                    changed.add(name);
                }
            }
            versions.add(new StateVersion(row.version, Versions.format(row.version), length(row.partial) + length(row.completed),
                    row.partial == null, List.copyOf(changed)));
        }
        return versions;
    }

    /** What a restore wrote: the version it went back to, and the new version that holds it now. */
    public record Restored(@JsonProperty("restored") StateVersion restored, @JsonProperty("now") StateVersion now) {
    }

    /**
     * Writes back the newest version at or before {@code atMillis}, under the lock, as a new version: the history
     * keeps every version, the restored one included.
     */
    public Restored restore(String stateId, long atMillis, Duration retry, Duration wait) {
        requireHistory();
        String token = lock.acquire(stateId, retry, wait);
        try {
            List<HistoryRow> rows = historyRows(stateId, 1, atMillis);
            if (rows.isEmpty()) {
                throw new BridgeException(ErrorCode.INVALID_PARAMS, "State id '" + stateId + "' has no version at or "
                        + "before " + Versions.format(atMillis) + " in the history (kept " + tables.historyDays
                        + " days); list the versions with: python -m meltano_state_backend_clickhouse history '" + stateId + "'");
            }
            HistoryRow old = rows.get(0);
            write(new StoredState(stateId, part(stateId, old.partial), part(stateId, old.completed)), token,
                    newestVersion(List.of(stateId)));
            return new Restored(versions(stateId, rows, 1).get(0), history(stateId, 1).get(0));
        } finally {
            lock.release(token);
        }
    }

    private void requireHistory() {
        if (tables.historyDays == 0) {
            throw new BridgeException(ErrorCode.CONFIGURATION, "State history is off (history_days = 0); set "
                    + "state_backend.clickhouse.history_days to keep it.");
        }
    }

    /** The bookmarks of a version: singer_state.bookmarks, else singer_state's or the state's own keys. */
    private Map<String, JsonNode> bookmarks(String stateId, byte[] partial, byte[] completed) {
        Map<String, JsonNode> marks = new HashMap<>();
        for (byte[] part : new byte[][] {completed, partial}) { // partial over completed, as Meltano merges them
            if (part == null) {
                continue;
            }
            JsonNode node;
            try {
                node = json.readTree(part);
            } catch (IOException e) {
                throw new BridgeException(ErrorCode.CLICKHOUSE, "A version of '" + stateId + "' in the history is not JSON.");
            }
            JsonNode level = node.at("/singer_state/bookmarks");
            if (!level.isObject()) {
                level = node.path("singer_state").isObject() ? node.path("singer_state") : node;
            }
            level.fields().forEachRemaining(e -> marks.put(e.getKey(), e.getValue()));
        }
        return marks;
    }

    private static Set<String> union(Set<String> a, Set<String> b) {
        Set<String> all = new TreeSet<>(a);
        all.addAll(b);
        return all;
    }

    private static long length(byte[] part) {
        return part == null ? 0 : part.length;
    }

    public void delete(String stateId) {
        writeAllPending();
        known.remove(stateId);
        ch.execute("DELETE FROM " + tables.state + " WHERE state_id = " + Sql.literal(stateId));
    }

    /** Removes every state; answers how many ids there were. */
    public long clearAll() {
        writeAllPending();
        Long count = ch.queryOne("SELECT count() FROM " + tables.state + " FINAL" + deployment.readClause(),
                rs -> rs.getLong(1));
        known.clear();
        ch.execute("TRUNCATE TABLE " + tables.state);
        return count == null ? 0 : count;
    }

    private static String matching(String pattern) {
        return pattern == null || pattern.equals("*") ? "" : " WHERE state_id LIKE " + Sql.likePattern(pattern);
    }

    private StoredState row(InputStream in) throws IOException {
        String id = RowBinary.readString(in);
        return new StoredState(id, part(id, RowBinary.readNullableBytes(in)), part(id, RowBinary.readNullableBytes(in)));
    }

    private StatePart part(String stateId, byte[] stored) {
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
