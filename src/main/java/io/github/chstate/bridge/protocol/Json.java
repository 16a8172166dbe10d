package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.ObjectMapper;

/** The one ObjectMapper configuration of the bridge. */
public final class Json {
    /**
     * How deep a message may nest: Jackson's default (1,000) is below what Python's json writes (a state nested
     * ~990 deep inside the message's own levels), and a state's text is kept as text, never walked ({@code StatePart}).
     */
    static final int MAX_NESTING = 3000;

    private Json() {
    }

    /**
     * Jackson refuses strings over 20 M characters by default; a state may be bigger than that. NaN and infinities
     * are not JSON, but Python's json writes and reads them, so a state the upstream add-on stored may have them.
     */
    public static ObjectMapper mapper() {
        JsonFactory factory = JsonFactory.builder()
                .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE)
                        .maxNestingDepth(MAX_NESTING).build())
                .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
                .build();
        return new ObjectMapper(factory);
    }
}
