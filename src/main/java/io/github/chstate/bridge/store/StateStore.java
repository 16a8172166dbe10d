package io.github.chstate.bridge.store;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.chstate.bridge.BridgeException;
import io.github.chstate.bridge.ErrorCode;

import java.sql.ResultSet;
import java.sql.SQLException;
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
 * <p>Without the lock, the server computes that version inside the INSERT, so writers' clocks do not matter. Under
 * the lock (Meltano's update: get, merge, set), nobody else writes the id, so the version this bridge last read or
 * wrote under the same claim is still the newest; the set then sends a plain INSERT with its version, the later of
 * that plus 1 ms and the server's time. That INSERT costs the server a third of one with the subquery.
 *
 * <p>On replicated and Shared tables, reads that must see the newest write and inserts carry the settings the
 * {@link Deployment} needs for that.
 */
public final class StateStore {
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
        return ch.queryOne("SELECT state_id, partial_state, completed_state, toUnixTimestamp64Milli(updated_at) FROM "
                + tables.state + " FINAL WHERE state_id = " + Sql.literal(stateId) + deployment.readClause(), rs -> {
                    if (token != null) {
                        known.put(stateId, new Known(token, rs.getLong(4)));
                    }
                    return row(rs);
                });
    }

    public List<StoredState> getAll(String pattern) {
        return ch.query("SELECT state_id, partial_state, completed_state FROM " + tables.state + " FINAL" + matching(pattern)
                + " ORDER BY state_id" + deployment.readClause(), this::row);
    }

    public List<String> stateIds(String pattern) {
        return ch.query("SELECT state_id FROM " + tables.state + " FINAL" + matching(pattern) + " ORDER BY state_id"
                + deployment.readClause(), rs -> rs.getString(1));
    }

    /** Under this bridge's lock on the id, a plain INSERT with its version (see above); else as {@link #setAll}. */
    public void set(StoredState state) {
        String id = state.stateId();
        String token = lock.heldToken(id);
        if (token == null) {
            setAll(List.of(state));
            return;
        }
        Known last = known.remove(id);
        long newest = last != null && last.token.equals(token) ? last.versionMillis : newestVersion(id);
        long version = Math.max(clock.nowMillis(), newest + 1);
        ch.execute("INSERT INTO " + tables.state + " (state_id, partial_state, completed_state, updated_at) "
                + deduplicated(false) + " VALUES " + tuple(state, version / 1000 + "." + String.format("%03d", version % 1000)));
        known.put(id, new Known(token, version));
    }

    private long newestVersion(String stateId) {
        return ch.queryOne("SELECT toUnixTimestamp64Milli(max(updated_at)) FROM " + tables.state
                + " WHERE state_id = " + Sql.literal(stateId) + deployment.readClause(), rs -> rs.getLong(1));
    }

    /** Writes all states in one INSERT; for an id given twice the last one counts. */
    public int setAll(Collection<StoredState> states) {
        Map<String, StoredState> byId = new LinkedHashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s));
        if (byId.isEmpty()) {
            return 0;
        }
        known.keySet().removeAll(byId.keySet());
        String rows = byId.values().stream().map(s -> tuple(s, null)).collect(Collectors.joining(", "));
        String ids = byId.keySet().stream().map(Sql::literal).collect(Collectors.joining(", "));
        // One version for the whole batch, above the newest stored version of any of its ids: a scalar subquery is
        // cheaper for the server than joining per id, and just as good for "the last write wins".
        ch.execute("INSERT INTO " + tables.state + " (state_id, partial_state, completed_state, updated_at) "
                + "SELECT state_id, partial_state, completed_state, greatest(now64(3), (SELECT max(updated_at) FROM "
                + tables.state + " WHERE state_id IN (" + ids + ")) + toIntervalMillisecond(1)) "
                + "FROM values('state_id String, partial_state Nullable(String), completed_state Nullable(String)', " + rows + ") "
                + deduplicated(true));
        return byId.size();
    }

    /** A state as a row of literals; {@code version} (seconds with 3 decimals) last unless null. */
    private String tuple(StoredState s, String version) {
        return "(" + Sql.literal(s.stateId()) + ", " + Sql.nullableLiteral(text(s.partial())) + ", "
                + Sql.nullableLiteral(text(s.completed())) + (version == null ? "" : ", " + version) + ")";
    }

    /** An INSERT's settings; {@code readsToo}: it reads the newest version of the ids it writes. */
    private String deduplicated(boolean readsToo) {
        return "SETTINGS async_insert = 0, insert_deduplicate = 1, insert_deduplication_token = "
                + Sql.literal(UUID.randomUUID().toString()) + deployment.insertSettings(readsToo);
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

    private StoredState row(ResultSet rs) throws SQLException {
        String id = rs.getString(1);
        return new StoredState(id, object(id, rs.getString(2)), object(id, rs.getString(3)));
    }

    /** The stored form of a part: NULL for an empty one, as the upstream add-on stores it. */
    private String text(ObjectNode part) {
        if (part == null || part.isEmpty()) {
            return null;
        }
        try {
            return json.writeValueAsString(part);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    private ObjectNode object(String stateId, String stored) {
        if (stored == null || stored.isEmpty()) {
            return json.createObjectNode();
        }
        try {
            JsonNode node = json.readTree(stored);
            if (node.isObject()) {
                return (ObjectNode) node;
            }
            if (node.isNull()) {
                return json.createObjectNode();
            }
        } catch (JsonProcessingException e) {
            // reported below
        }
        throw new BridgeException(ErrorCode.CLICKHOUSE, "The stored state of '" + stateId + "' in " + tables.schema
                + " is not a JSON object; fix or delete that row (meltano state clear '" + stateId + "').");
    }
}
