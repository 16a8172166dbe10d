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
import java.util.stream.Collectors;

/**
 * Reads and writes the state table. Reads use FINAL, so they see one row per id: the one with the highest
 * {@code updated_at}. Each write gives its rows a version above every version already stored for the id (computed by
 * the server, so writers' clocks do not matter) and a fresh deduplication token, so that A → B → A rewrites are never
 * dropped as duplicates, while a request the driver re-sends is.
 */
public final class StateStore {
    private final ClickHouse ch;
    private final Tables tables;
    private final ObjectMapper json;

    public StateStore(ClickHouse ch, Tables tables, ObjectMapper json) {
        this.ch = ch;
        this.tables = tables;
        this.json = json;
    }

    public StoredState get(String stateId) {
        return ch.queryOne(selectStates() + " WHERE state_id = " + Sql.literal(stateId), this::row);
    }

    public List<StoredState> getAll(String pattern) {
        return ch.query(selectStates() + matching(pattern) + " ORDER BY state_id", this::row);
    }

    /** What {@link #row} reads. */
    private String selectStates() {
        return "SELECT state_id, partial_state, completed_state FROM " + tables.state + " FINAL";
    }

    public List<String> stateIds(String pattern) {
        return ch.query("SELECT state_id FROM " + tables.state + " FINAL" + matching(pattern) + " ORDER BY state_id",
                rs -> rs.getString(1));
    }

    public void set(StoredState state) {
        setAll(List.of(state));
    }

    /** Writes all states in one INSERT; for an id given twice the last one counts. */
    public int setAll(Collection<StoredState> states) {
        Map<String, StoredState> byId = new LinkedHashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s));
        if (byId.isEmpty()) {
            return 0;
        }
        String rows = byId.values().stream()
                .map(s -> "(" + Sql.literal(s.stateId()) + ", " + Sql.nullableLiteral(text(s.partial())) + ", "
                        + Sql.nullableLiteral(text(s.completed())) + ")")
                .collect(Collectors.joining(", "));
        String ids = byId.keySet().stream().map(Sql::literal).collect(Collectors.joining(", "));
        // One version for the whole batch, above the newest stored version of any of its ids: a scalar subquery is
        // cheaper for the server than joining per id, and just as good for "the last write wins".
        ch.execute("INSERT INTO " + tables.state + " (state_id, partial_state, completed_state, updated_at) "
                + "SELECT state_id, partial_state, completed_state, greatest(now64(3), (SELECT max(updated_at) FROM "
                + tables.state + " WHERE state_id IN (" + ids + ")) + toIntervalMillisecond(1)) "
                + "FROM values('state_id String, partial_state Nullable(String), completed_state Nullable(String)', " + rows + ") "
                + "SETTINGS async_insert = 0, insert_deduplicate = 1, insert_deduplication_token = "
                + Sql.literal(UUID.randomUUID().toString()));
        return byId.size();
    }

    public void delete(String stateId) {
        ch.execute("DELETE FROM " + tables.state + " WHERE state_id = " + Sql.literal(stateId));
    }

    /** Removes every state; answers how many ids there were. */
    public long clearAll() {
        Long count = ch.queryOne("SELECT count() FROM " + tables.state + " FINAL", rs -> rs.getLong(1));
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
