package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.POJONode;
import io.github.chstate.bridge.store.StatePart;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class MessageReaderTest {
    private final ObjectMapper json = Json.mapper();
    private final MessageReader reader = new MessageReader(json);

    private JsonNode read(String message) throws Exception {
        byte[] bytes = message.getBytes(StandardCharsets.UTF_8);
        return reader.read(bytes, bytes.length);
    }

    private static String part(JsonNode node) {
        assertTrue(node instanceof POJONode, "not kept as text: " + node);
        return ((StatePart) ((POJONode) node).getPojo()).text();
    }

    @Test
    void statePartsAreKeptAsTheirExactTextEverythingElseIsATree() throws Exception {
        String completed = "{ \"singer_state\" : {\"partial\": {\"x\": [1, 2.50, \"ü\\u00fc\\\"}{\"]}, \"completed\": {}} }";
        JsonNode message = read("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"set\",\"params\":{\"state_id\":\"a\","
                + "\"partial\":{},\"completed\":" + completed + "}}");
        assertEquals("7", message.get("id").toString()); // a number id is kept as its text
        assertEquals("a", message.at("/params/state_id").asText());
        assertEquals("{}", part(message.at("/params/partial")));
        assertEquals(completed, part(message.at("/params/completed"))); // keys inside a part are not looked at
    }

    @Test
    void thePartsOfEveryStateOfASetAllAreKept() throws Exception {
        JsonNode message = read("{\"params\":{\"states\":[{\"state_id\":\"a\",\"completed\":{\"n\":1}},"
                + "{\"state_id\":\"b\",\"partial\":{\"n\":2},\"completed\":null}]}}");
        assertEquals("{\"n\":1}", part(message.at("/params/states/0/completed")));
        assertEquals("{\"n\":2}", part(message.at("/params/states/1/partial")));
        assertTrue(message.at("/params/states/1/completed").isNull());
    }

    @Test
    void aPartThatIsNotAnObjectStaysAValueForTheParamsCheck() throws Exception {
        assertEquals(5, read("{\"params\":{\"partial\":5}}").at("/params/partial").asInt());
        assertEquals("[1]", read("{\"params\":{\"completed\":[1]}}").at("/params/completed").toString());
    }

    @Test
    void invalidJsonInsideAPartIsStillRefused() {
        assertThrows(JsonProcessingException.class, () -> read("{\"params\":{\"completed\":{\"a\":tru}}}"));
        assertThrows(JsonProcessingException.class, () -> read("{\"params\":{\"completed\":{\"a\":1}}} {}"));
        assertThrows(JsonProcessingException.class, () -> read("{\"params\":{\"completed\":{\"a\":1}"));
    }

    @Test
    void anEmptyMessageIsNull() throws Exception {
        assertNull(read("  "));
    }
}
