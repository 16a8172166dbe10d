package io.github.chstate.bridge.store;

import com.fasterxml.jackson.core.JsonFactory;
import io.github.chstate.bridge.protocol.Json;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

class StatePartTest {
    private final JsonFactory factory = Json.mapper().getFactory();

    private StatePart stored(String text) throws Exception {
        return StatePart.ofStored(text == null ? null : text.getBytes(StandardCharsets.UTF_8), factory);
    }

    @Test
    void nullEmptyAndJsonNullAreEmptyAndAnEmptyObjectIsStoredAsNull() throws Exception {
        for (String empty : new String[] {null, "", "  ", "null", " null "}) {
            assertEquals(StatePart.EMPTY, stored(empty), String.valueOf(empty));
        }
        assertNull(StatePart.of("{ }").stored());
        assertNull(StatePart.EMPTY.stored());
        assertArrayEquals("{\"a\":1}".getBytes(StandardCharsets.UTF_8), StatePart.of("{\"a\":1}").stored());
    }

    @Test
    void anObjectComesBackAsItIsOnOneLine() throws Exception {
        assertEquals("{\"a\": [1, NaN], \"b\": \"ü\"}", stored("{\"a\": [1, NaN], \"b\": \"ü\"}").text());
        assertEquals("{   \"a\": 1  }", stored("{\n  \"a\": 1\r\n}").text()); // indented by someone: only whitespace
        assertEquals("{ \"a\": 1}", stored("{\r\"a\": 1}").text()); // a lone carriage return is a line break too
    }

    @Test
    void anythingButOneObjectIsRefused() throws Exception {
        for (String bad : new String[] {"[1]", "\"text\"", "5", "{\"a\":1} {}", "{\"a\":1", "{'a':1}", "{\"a\":1}x"}) {
            assertNull(stored(bad), bad);
        }
    }
}
