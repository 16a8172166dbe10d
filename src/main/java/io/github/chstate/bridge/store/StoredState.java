package io.github.chstate.bridge.store;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.node.ObjectNode;

/** One state id's state: both parts are JSON objects, empty when unset (never null). */
public record StoredState(
        @JsonProperty("state_id") String stateId,
        @JsonProperty("partial") ObjectNode partial,
        @JsonProperty("completed") ObjectNode completed) {
}
