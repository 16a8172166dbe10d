package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.ObjectMapper;

/** The one ObjectMapper configuration of the bridge. */
public final class Json {
    private Json() {
    }

    /** Jackson refuses strings over 20 M characters by default; a state may be bigger than that. */
    public static ObjectMapper mapper() {
        JsonFactory factory = JsonFactory.builder()
                .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).build())
                .build();
        return new ObjectMapper(factory);
    }
}
