package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.ObjectMapper;

/** The one ObjectMapper configuration of the bridge. */
public final class Json {
    private Json() {
    }

    /**
     * Jackson refuses strings over 20 M characters by default; a state may be bigger than that. NaN and infinities
     * are not JSON, but Python's json writes and reads them, so a state the upstream add-on stored may have them.
     */
    public static ObjectMapper mapper() {
        JsonFactory factory = JsonFactory.builder()
                .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).build())
                .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
                .build();
        return new ObjectMapper(factory);
    }
}
