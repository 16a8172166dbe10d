package io.github.chstate.bridge.store;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.RowBinary;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.lock.Run;
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
import java.util.UUID;

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
    private final StateSurgery surgery;

    public StateHistory(ClickHouse ch, Tables tables, Deployment deployment, ObjectMapper json, StateLock lock,
                        StateStore store) {
        this.ch = ch;
        this.tables = tables;
        this.deployment = deployment;
        this.json = json;
        this.lock = lock;
        this.store = store;
        this.surgery = new StateSurgery(json);
    }

    /** The newest {@code limit} versions of the id in the history table, newest first. */
    public List<StateVersion> history(String stateId, int limit) {
        store.writeAllPending();
        return versions(stateId, historyRows(stateId, limit, Long.MAX_VALUE), limit);
    }

    /** A row of the history table. */
    private record HistoryRow(long version, byte[] partial, byte[] completed) {
    }

    /**
     * The newest {@code limit} rows at or before {@code atMostMillis}, and one more: what the oldest of them changed.
     * A row stored twice (an insert sent again while its first try still ran) is one version.
     */
    private List<HistoryRow> historyRows(String stateId, int limit, long atMostMillis) {
        requireHistory();
        return ch.queryRowBinary("SELECT DISTINCT toUnixTimestamp64Milli(updated_at), partial_state, completed_state FROM "
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

    /**
     * What a change of streams did or would do; {@code version} is the one written and {@code previous} the one before
     * it (what a restore goes back to, to undo it), both null for a preview.
     */
    public record Surgery(@JsonProperty("state_id") String stateId, @JsonProperty("changes") List<StateSurgery.Change> changes,
                          @JsonProperty("executed") boolean executed, @JsonProperty("version") StateVersion version,
                          @JsonProperty("previous") StateVersion previous, @JsonProperty("warning") String warning) {
    }

    /** Which change: reset, restore (of the streams named, or of the whole state) or set_bookmark. */
    public record Action(String name, List<String> streams, long atMillis, JsonNode value) {
    }

    /**
     * Previews a change of streams (nothing written), or with {@code execute} makes it under the lock, as a new
     * version. While a run's lease holds the id, executing is refused naming the run; {@code force} takes the lease
     * over as {@code meltano run --force} does (the displaced run writes nothing after), with a warning.
     */
    public Surgery surgery(String stateId, Action action, boolean execute, boolean force, Duration retry, Duration wait) {
        if (!execute) {
            return new Surgery(stateId, plan(stateId, action, store.get(stateId)).changes(), false, null, null, null);
        }
        String warning = null;
        Run.Holder holder = lock.runs().stream().filter(l -> l.stateId().equals(stateId))
                .map(l -> Run.holder(l.token())).filter(Objects::nonNull).findFirst().orElse(null);
        if (holder != null && !force) {
            throw new BridgeException(ErrorCode.RUN_IN_PROGRESS, "A run holds state id '" + stateId + "': "
                    + holder.describe() + ". Nothing was written. Wait for it to end, or add --force to take the "
                    + "state id over from it (it then writes no more state).");
        }
        if (holder != null) {
            warning = "Took state id '" + stateId + "' over from " + holder.describe() + ": it writes no more state.";
            lock.lease(stateId, new Run(UUID.randomUUID().toString(), host(), ProcessHandle.current().pid(),
                    "python -m meltano_state_backend_clickhouse " + action.name(), true), retry, wait);
        }
        String token = lock.acquire(stateId, retry, wait);
        try {
            StoredState current = store.get(stateId);
            StateSurgery.Planned planned = plan(stateId, action, current);
            // What an undo goes back to; none for a cleared state brought back (its undo is a clear)
            List<StateVersion> before = current == null ? List.of() : history(stateId, 1);
            store.writeUnderLock(planned.state(), token);
            return new Surgery(stateId, planned.changes(), true, history(stateId, 1).get(0),
                    before.isEmpty() ? null : before.get(0), warning);
        } finally {
            lock.release(token);
        }
    }

    private StateSurgery.Planned plan(String stateId, Action action, StoredState current) {
        // A cleared state (meltano state clear) keeps its history: it can only come back whole (diff takes null)
        if (current == null && (!action.name().equals("restore") || !action.streams().isEmpty())) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "State id '" + stateId + "' has no state; a "
                    + "cleared state comes back whole: restore without --stream.");
        }
        return switch (action.name()) {
            case "reset" -> surgery.reset(current, action.streams());
            case "set_bookmark" -> surgery.setBookmark(current, single(action.streams()), action.value());
            case "restore" -> {
                StoredState old = state(stateId, versionAt(stateId, action.atMillis()).get(0));
                yield action.streams().isEmpty() ? new StateSurgery.Planned(surgery.diff(current, old), old)
                        : surgery.restore(current, old, action.streams());
            }
            default -> throw new BridgeException(ErrorCode.INVALID_PARAMS, "Unknown change '" + action.name()
                    + "': reset, restore or set_bookmark.");
        };
    }

    private static String single(List<String> streams) {
        if (streams.size() != 1) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "set-bookmark takes one stream (--stream NAME), got "
                    + streams.size() + ".");
        }
        return streams.get(0);
    }

    /**
     * The newest version at or before {@code atMillis}, and the one before it (what it changed); an error saying how
     * to list them if there is none.
     */
    private List<HistoryRow> versionAt(String stateId, long atMillis) {
        List<HistoryRow> rows = historyRows(stateId, 1, atMillis);
        if (rows.isEmpty()) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "State id '" + stateId + "' has no version at or "
                    + "before " + Versions.format(atMillis) + " in the history (kept " + tables.historyDays
                    + " days); list the versions with: python -m meltano_state_backend_clickhouse history '" + stateId + "'");
        }
        return rows;
    }

    /**
     * What a version changed, stream by stream, against the version before it; without {@code atMillis} (null), the
     * newest version's.
     */
    public List<StateSurgery.Change> diff(String stateId, Long atMillis) {
        requireHistory();
        store.writeAllPending();
        List<HistoryRow> rows = historyRows(stateId, 1, atMillis == null ? Long.MAX_VALUE : atMillis);
        if (rows.isEmpty() || (atMillis != null && rows.get(0).version != atMillis)) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "State id '" + stateId + "' has no version "
                    + (atMillis == null ? "" : atMillis + " ") + "in the history; list them with: python -m "
                    + "meltano_state_backend_clickhouse history '" + stateId + "'");
        }
        StoredState before = rows.size() > 1 ? state(stateId, rows.get(1)) : null;
        return surgery.diff(before, state(stateId, rows.get(0)));
    }

    private StoredState state(String stateId, HistoryRow row) {
        return new StoredState(stateId, store.part(stateId, row.partial), store.part(stateId, row.completed));
    }

    private static String host() {
        try {
            return java.net.InetAddress.getLocalHost().getHostName();
        } catch (java.net.UnknownHostException e) {
            return "unknown";
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
