package io.github.chstate.bridge.store;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;

import java.io.IOException;
import java.io.InputStream;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;

/**
 * Reads and writes the state table. Reads use FINAL, so they see one row per id: the one with the highest
 * {@code updated_at}. Each write gives its rows a version above every version already stored for the id, and a fresh
 * deduplication token, so that A → B → A rewrites are never dropped as duplicates, while a request the driver
 * re-sends is.
 *
 * <p>A version is the later of the server's time ({@link ServerClock}) and the newest stored version of the id plus
 * 1 ms. Without the lock, the newest is read first, in one query for all ids of the write. Under the lock (Meltano's
 * update: get, merge, set) nobody else writes the id, so the version this bridge last read or wrote under the same
 * lock is still the newest, and the set is one statement: the INSERT.
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

    /** The newest version of an id as last read or written under the claim {@code token}. */
    private record Known(String token, long versionMillis) {
    }

    private final Map<String, Known> known = new ConcurrentHashMap<>();

    public StateStore(ClickHouse ch, Tables tables, ServerClock clock, StateLock lock, Deployment deployment,
                      ObjectMapper json) {
        this.ch = ch;
        this.tables = tables;
        this.clock = clock;
        this.lock = lock;
        this.deployment = deployment;
        this.json = json;
    }

    public StoredState get(String stateId) {
        String token = lock.heldToken(stateId);
        List<StoredState> rows = ch.queryRowBinary("SELECT state_id, partial_state, completed_state, "
                + "toUnixTimestamp64Milli(updated_at) FROM " + tables.state + " FINAL WHERE state_id = "
                + Sql.literal(stateId) + deployment.readClause(), in -> {
                    StoredState state = row(in);
                    long version = RowBinary.readInt64(in);
                    if (token != null) {
                        known.put(stateId, new Known(token, version));
                    }
                    return state;
                });
        return rows.isEmpty() ? null : rows.get(0);
    }

    public List<StoredState> getAll(String pattern) {
        return ch.queryRowBinary("SELECT state_id, partial_state, completed_state FROM " + tables.state + " FINAL"
                + matching(pattern) + " ORDER BY state_id" + deployment.readClause(), this::row);
    }

    public List<String> stateIds(String pattern) {
        return ch.query("SELECT state_id FROM " + tables.state + " FINAL" + matching(pattern) + " ORDER BY state_id"
                + deployment.readClause(), rs -> rs.getString(1));
    }

    /** Under this bridge's lock on the id, with the version it knows (see above); else as {@link #setAll}. */
    public void set(StoredState state) {
        String id = state.stateId();
        String token = lock.heldToken(id);
        if (token == null) {
            setAll(List.of(state));
            return;
        }
        Known last = known.remove(id);
        long newest = last != null && last.token.equals(token) ? last.versionMillis : newestVersion(List.of(id));
        long version = Math.max(clock.nowMillis(), newest + 1);
        insert(List.of(state), version);
        known.put(id, new Known(token, version));
    }

    /** Writes all states in one INSERT, with one version above the newest stored one of any of their ids. */
    public int setAll(Collection<StoredState> states) {
        Map<String, StoredState> byId = new LinkedHashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s)); // for an id given twice the last one counts
        if (byId.isEmpty()) {
            return 0;
        }
        known.keySet().removeAll(byId.keySet());
        insert(byId.values(), Math.max(clock.nowMillis(), newestVersion(byId.keySet()) + 1));
        return byId.size();
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

    public void delete(String stateId) {
        known.remove(stateId);
        ch.execute("DELETE FROM " + tables.state + " WHERE state_id = " + Sql.literal(stateId));
    }

    /** Removes every state; answers how many ids there were. */
    public long clearAll() {
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
