package io.github.chstate.bridge.store;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.RowBinary;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.lock.StateLock;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;

/**
 * The versions the history table keeps of each state ({@link Tables}), what each changed, and going back to one: a
 * restore writes an old version again, as a new one, under the lock, through the {@link StateStore}.
 */
public final class StateHistory {
    private final ClickHouse ch;
    private final Tables tables;
    private final Deployment deployment;
    private final ObjectMapper json;
    private final StateLock lock;
    private final StateStore store;

    public StateHistory(ClickHouse ch, Tables tables, Deployment deployment, ObjectMapper json, StateLock lock,
                        StateStore store) {
        this.ch = ch;
        this.tables = tables;
        this.deployment = deployment;
        this.json = json;
        this.lock = lock;
        this.store = store;
    }

    /** The newest {@code limit} versions of the id in the history table, newest first. */
    public List<StateVersion> history(String stateId, int limit) {
        store.writeAllPending();
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
            store.writeUnderLock(new StoredState(stateId, store.part(stateId, old.partial),
                    store.part(stateId, old.completed)), token);
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
}
