package io.github.chstate.bridge.store;

import com.fasterxml.jackson.annotation.JsonProperty;

/** One state id's state; a part missing from a request is empty. */
public record StoredState(
        @JsonProperty("state_id") String stateId,
        @JsonProperty("partial") StatePart partial,
        @JsonProperty("completed") StatePart completed) {

    public StoredState {
        partial = partial == null ? StatePart.EMPTY : partial;
        completed = completed == null ? StatePart.EMPTY : completed;
    }
}
