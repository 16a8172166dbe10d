package io.github.chstate.bridge.store;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.DeserializationContext;
import com.fasterxml.jackson.databind.JsonDeserializer;
import com.fasterxml.jackson.databind.JsonSerializer;
import com.fasterxml.jackson.databind.SerializerProvider;
import com.fasterxml.jackson.databind.annotation.JsonDeserialize;
import com.fasterxml.jackson.databind.annotation.JsonSerialize;
import com.fasterxml.jackson.databind.util.TokenBuffer;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * One part of a state (partial or completed): the UTF-8 text of a JSON object, carried as bytes from the request to
 * the table and back. A state can be tens of MB, and turning it into Java objects and back would cost more than
 * storing it. Requests bring it as text ({@code protocol.MessageReader}); a stored text is checked once, as it is
 * read ({@link #ofStored}), because it goes into the protocol stream unparsed.
 */
@JsonSerialize(using = StatePart.Writer.class)
@JsonDeserialize(using = StatePart.Reader.class)
public final class StatePart {
    public static final StatePart EMPTY = of("{}");

    private final byte[] utf8;

    /** {@code utf8} must be one JSON object, on one line; {@link #ofStored} makes sure of both. */
    public StatePart(byte[] utf8) {
        this.utf8 = utf8;
    }

    public static StatePart of(String json) {
        return new StatePart(json.getBytes(StandardCharsets.UTF_8));
    }

    /** The bytes as they go into the table: null for an empty object, as the upstream add-on stores it. */
    byte[] stored() {
        return isEmpty() ? null : utf8;
    }

    public String text() {
        return new String(utf8, StandardCharsets.UTF_8);
    }

    private boolean isEmpty() {
        int i = 1; // after the '{'
        while (i < utf8.length && (utf8[i] == ' ' || utf8[i] == '\t' || utf8[i] == '\n' || utf8[i] == '\r')) {
            i++;
        }
        return i < utf8.length && utf8[i] == '}';
    }

    /**
     * A stored text as a part: NULL, '' and 'null' are empty. Null when it is not one JSON object; {@code factory} is
     * that of the bridge's JSON, for the same rules as requests. Line breaks (only whitespace, in valid JSON) become
     * spaces: a response is one line.
     */
    static StatePart ofStored(byte[] stored, JsonFactory factory) throws IOException {
        try (JsonParser p = factory.createParser(stored == null ? new byte[0] : stored)) {
            JsonToken first = p.nextToken();
            if (first == null || first == JsonToken.VALUE_NULL) {
                return p.nextToken() == null ? EMPTY : null;
            }
            if (first != JsonToken.START_OBJECT) {
                return null;
            }
            p.skipChildren();
            if (p.nextToken() != null) {
                return null;
            }
            if (p.currentLocation().getLineNr() == 1) { // the parser counts line breaks (\n, \r): none to replace
                return new StatePart(stored);
            }
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            return null;
        }
        for (int i = 0; i < stored.length; i++) {
            if (stored[i] == '\n' || stored[i] == '\r') {
                stored[i] = ' ';
            }
        }
        return new StatePart(stored);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof StatePart other && Arrays.equals(other.utf8, utf8);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(utf8);
    }

    @Override
    public String toString() {
        return utf8.length <= 200 ? text() : new String(utf8, 0, 200, StandardCharsets.UTF_8) + "… (" + utf8.length + " bytes)";
    }

    /**
     * Writes the bytes as they are: they are one JSON object already. jsonrpc4j first turns a result into a tree
     * (a TokenBuffer), where the part stays an object of its own until the tree is written.
     */
    static final class Writer extends JsonSerializer<StatePart> {
        @Override
        public void serialize(StatePart part, JsonGenerator gen, SerializerProvider provider) throws IOException {
            if (gen instanceof TokenBuffer) {
                gen.writeEmbeddedObject(part);
            } else if (gen.getOutputTarget() instanceof OutputStream out) {
                gen.writeRawValue(""); // the separator before a value, and the generator's count of values
                gen.flush();
                out.write(part.utf8);
            } else {
                gen.writeRawValue(part.text());
            }
        }
    }
    /**
     * Takes the text the {@code MessageReader} kept for a request (it arrives as an embedded object); any other JSON
     * object is written out as text. A missing part is empty; anything but an object is refused.
     */
    static final class Reader extends JsonDeserializer<StatePart> {
        @Override
        public StatePart deserialize(JsonParser p, DeserializationContext ctxt) throws IOException {
            if (p.currentToken() == JsonToken.VALUE_EMBEDDED_OBJECT && p.getEmbeddedObject() instanceof StatePart part) {
                return part;
            }
            if (p.currentToken() != JsonToken.START_OBJECT) {
                return (StatePart) ctxt.handleUnexpectedToken(StatePart.class, p);
            }
            return of(ctxt.readTree(p).toString());
        }

        @Override
        public StatePart getNullValue(DeserializationContext ctxt) {
            return EMPTY;
        }
    }
}
