package io.github.chstate.bridge.store;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeSet;
import java.util.function.Function;

/**
 * Changes to single streams' bookmarks ({@code singer_state.bookmarks.<stream>}, partitions included) of a Singer
 * state, the others left as they are: what each change would do, stream by stream, and the new state that does it.
 * The state is taken as Meltano reads it (the partial part merged over the completed one) and written back complete.
 * Reading the current state, the lock and the write are the caller's ({@code StateHistory.surgery}).
 */
public final class StateSurgery {
    /** One stream's bookmark before and after; null where the stream has none. */
    public record Change(@JsonProperty("stream") String stream, @JsonProperty("before") JsonNode before,
                         @JsonProperty("after") JsonNode after) {
    }

    /** The changes and the state that makes them. */
    record Planned(List<Change> changes, StoredState state) {
    }

    private final ObjectMapper json;

    StateSurgery(ObjectMapper json) {
        this.json = json;
    }

    /** Removes the streams' bookmarks. */
    Planned reset(StoredState current, List<String> streams) {
        return plan(current, streams, stream -> null);
    }

    /** Gives the streams the bookmarks they had in {@code old} (none, where they had none). */
    Planned restore(StoredState current, StoredState old, List<String> streams) {
        ObjectNode oldMarks = old == null ? json.createObjectNode() : bookmarksOrEmpty(merged(old));
        return plan(current, streams, stream -> oldMarks.get(stream), oldMarks);
    }

    /**
     * Sets the stream's {@code replication_key_value} (in each of its partitions too) and drops what the Singer SDK
     * keeps of a sync in progress ({@code progress_markers}), so that the next run starts from that value.
     */
    Planned setBookmark(StoredState current, String stream, JsonNode value) {
        return plan(current, List.of(stream), name -> {
            JsonNode found = bookmarks(merged(current)).get(name);
            ObjectNode mark = found instanceof ObjectNode object ? object.deepCopy() : json.createObjectNode();
            setValue(mark, value);
            JsonNode partitions = mark.get("partitions");
            if (partitions != null && partitions.isArray()) {
                partitions.forEach(p -> {
                    if (p instanceof ObjectNode partition) {
                        setValue(partition, value);
                    }
                });
            }
            return mark;
        });
    }

    private static void setValue(ObjectNode mark, JsonNode value) {
        mark.set("replication_key_value", value);
        mark.remove("progress_markers");
    }

    private Planned plan(StoredState current, List<String> streams, Function<String, JsonNode> after) {
        return plan(current, streams, after, json.createObjectNode());
    }

    /** {@code alsoKnown}: streams that may be named though the current state lacks them (a restore's old ones). */
    private Planned plan(StoredState current, List<String> streams, Function<String, JsonNode> after,
                         ObjectNode alsoKnown) {
        if (streams.isEmpty()) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "Name at least one stream (--stream NAME).");
        }
        ObjectNode state = merged(current);
        ObjectNode marks = bookmarks(state);
        List<Change> changes = new ArrayList<>();
        for (String stream : new TreeSet<>(streams)) {
            if (!marks.has(stream) && !alsoKnown.has(stream)) {
                TreeSet<String> known = new TreeSet<>();
                marks.fieldNames().forEachRemaining(known::add);
                throw new BridgeException(ErrorCode.INVALID_PARAMS, "State id '" + current.stateId() + "' has no "
                        + "stream '" + stream + "'; its streams: " + (known.isEmpty() ? "none" : String.join(", ", known))
                        + ".");
            }
            JsonNode before = marks.get(stream);
            JsonNode next = after.apply(stream);
            changes.add(new Change(stream, before, next));
            if (next == null) {
                marks.remove(stream);
            } else {
                marks.set(stream, next);
            }
        }
        StoredState written = new StoredState(current.stateId(), StatePart.EMPTY, StatePart.of(state.toString()));
        return new Planned(changes, written);
    }

    /** singer_state.bookmarks of a state as Meltano reads it; an error naming the state id where it has none. */
    private ObjectNode bookmarks(ObjectNode state) {
        JsonNode marks = state.path("singer_state").path("bookmarks");
        if (!(marks instanceof ObjectNode object)) {
            throw new BridgeException(ErrorCode.INVALID_PARAMS, "This state is not a Singer state: it has no "
                    + "singer_state.bookmarks object, so it has no streams to change. Use meltano state set to "
                    + "replace it whole.");
        }
        return object;
    }

    private ObjectNode bookmarksOrEmpty(ObjectNode state) {
        JsonNode marks = state.path("singer_state").path("bookmarks");
        return marks instanceof ObjectNode object ? object : json.createObjectNode();
    }

    /** The partial part deep-merged over the completed one, as Meltano's MeltanoState.merge_partial does. */
    ObjectNode merged(StoredState state) {
        ObjectNode completed = tree(state.stateId(), state.completed());
        merge(completed, tree(state.stateId(), state.partial()));
        return completed;
    }

    private static void merge(ObjectNode into, ObjectNode from) {
        for (Iterator<Map.Entry<String, JsonNode>> it = from.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            JsonNode existing = into.get(e.getKey());
            if (existing instanceof ObjectNode target && e.getValue() instanceof ObjectNode source) {
                merge(target, source);
            } else {
                into.set(e.getKey(), e.getValue());
            }
        }
    }

    private ObjectNode tree(String stateId, StatePart part) {
        try {
            JsonNode node = part == null ? json.createObjectNode() : json.readTree(part.text());
            return node instanceof ObjectNode object ? object : json.createObjectNode();
        } catch (IOException e) {
            throw new BridgeException(ErrorCode.CLICKHOUSE, "The stored state of '" + stateId + "' is not JSON.");
        }
    }

    /** What changed, stream by stream, from {@code before} to {@code after} (either may be null: no state). */
    List<Change> diff(StoredState before, StoredState after) {
        ObjectNode was = before == null ? json.createObjectNode() : bookmarksOrEmpty(merged(before));
        ObjectNode is = after == null ? json.createObjectNode() : bookmarksOrEmpty(merged(after));
        TreeSet<String> streams = new TreeSet<>();
        was.fieldNames().forEachRemaining(streams::add);
        is.fieldNames().forEachRemaining(streams::add);
        List<Change> changes = new ArrayList<>();
        for (String stream : streams) {
            if (!Objects.equals(was.get(stream), is.get(stream))) {
                changes.add(new Change(stream, was.get(stream), is.get(stream)));
            }
        }
        return changes;
    }
}
