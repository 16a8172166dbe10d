package io.github.chstate.bridge.store;

import com.fasterxml.jackson.annotation.JsonProperty;

import java.util.List;

/**
 * One version of a state in the history table.
 *
 * @param version  the version (milliseconds since the epoch, the row's {@code updated_at}); restore takes it
 * @param time     the same, as an ISO-8601 UTC time
 * @param size     bytes of both parts as stored
 * @param complete whether the run that wrote it had finished (no partial part)
 * @param changed  the bookmarks (streams) that differ from the version before, sorted
 */
public record StateVersion(
        @JsonProperty("version") long version,
        @JsonProperty("time") String time,
        @JsonProperty("size") long size,
        @JsonProperty("complete") boolean complete,
        @JsonProperty("changed") List<String> changed) {
}
