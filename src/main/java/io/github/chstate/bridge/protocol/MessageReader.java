package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.POJONode;
import com.fasterxml.jackson.databind.util.RawValue;
import io.github.chstate.bridge.store.StatePart;

import java.io.IOException;
import java.util.Arrays;
import java.util.Set;

/**
 * Reads one message into a tree, except for the parts of states: the value of a {@code partial} or {@code completed}
 * member that is an object is kept as its own text ({@link StatePart}, in an embedded-object node), found by the
 * parser's byte offsets. The parser still checks that text is valid JSON, but a state of 50 MB never becomes
 * millions of nodes, only to be written out as text again.
 */
final class MessageReader {
    private static final Set<String> STATE_PARTS = Set.of("partial", "completed");
    /** How deep state parts are looked for: {@code params.states[i].completed} is at 4. */
    private static final int STATE_DEPTH = 4;

    private final ObjectMapper json;
    private final JsonNodeFactory nodes;

    MessageReader(ObjectMapper json) {
        this.json = json;
        this.nodes = json.getNodeFactory();
    }

    /** The message's tree; null for an empty message. Throws Jackson's exception for anything but one JSON value. */
    JsonNode read(byte[] message, int length) throws IOException {
        try (JsonParser p = json.getFactory().createParser(message, 0, length)) {
            if (p.nextToken() == null) {
                return null;
            }
            JsonNode tree = p.currentToken() == JsonToken.START_OBJECT ? request(p, message) : value(p, message, false, 0);
            if (p.nextToken() != null) {
                throw new com.fasterxml.jackson.core.JsonParseException(p, "more than one JSON value in the message");
            }
            return tree;
        }
    }

    /**
     * The top-level object: as {@link #value}, but a number id is kept as its text, to be answered exactly as sent
     * (jsonrpc4j would turn one beyond 64 bits into another number).
     */
    private JsonNode request(JsonParser p, byte[] message) throws IOException {
        ObjectNode object = nodes.objectNode();
        while (p.nextToken() == JsonToken.FIELD_NAME) {
            String name = p.currentName();
            JsonToken token = p.nextToken();
            boolean number = token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT;
            object.set(name, name.equals("id") && number ? nodes.rawValueNode(new RawValue(p.getText()))
                    : value(p, message, STATE_PARTS.contains(name), 1));
        }
        return object;
    }

    /** Whether {@code id} is a number id as {@link #request} keeps it. */
    static boolean isNumberId(JsonNode id) {
        return id instanceof POJONode pojo && pojo.getPojo() instanceof RawValue;
    }

    private JsonNode value(JsonParser p, byte[] message, boolean statePart, int depth) throws IOException {
        if (!statePart && depth > STATE_DEPTH) {
            return json.readTree(p); // no state part this deep: Jackson's reader, which does not recurse
        }
        switch (p.currentToken()) {
            case START_OBJECT -> {
                if (statePart) {
                    int start = (int) p.currentTokenLocation().getByteOffset();
                    p.skipChildren();
                    int end = (int) p.currentLocation().getByteOffset();
                    return nodes.pojoNode(new StatePart(Arrays.copyOfRange(message, start, end)));
                }
                ObjectNode object = nodes.objectNode();
                while (p.nextToken() == JsonToken.FIELD_NAME) {
                    String name = p.currentName();
                    p.nextToken();
                    object.set(name, value(p, message, STATE_PARTS.contains(name), depth + 1));
                }
                return object;
            }
            case START_ARRAY -> {
                ArrayNode array = nodes.arrayNode();
                while (p.nextToken() != JsonToken.END_ARRAY) {
                    array.add(value(p, message, false, depth + 1));
                }
                return array;
            }
            default -> {
                return json.readTree(p); // a scalar
            }
        }
    }
}
