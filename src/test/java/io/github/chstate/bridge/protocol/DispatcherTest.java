package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.error.ErrorCode;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Dispatch and error mapping against the real service, before initialize (no ClickHouse needed). */
class DispatcherTest {
    private final ObjectMapper json = Json.mapper();
    private final Dispatcher dispatcher = new Dispatcher(json, new BridgeService(json));

    private JsonNode call(String message) throws Exception {
        JsonNode response = dispatcher.handle(message.getBytes(StandardCharsets.UTF_8));
        if (response == null) {
            return null;
        }
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        dispatcher.write(response, out);
        return json.readTree(out.toByteArray());
    }

    private static void assertError(JsonNode response, ErrorCode code) {
        assertEquals(code.number(), response.path("error").path("code").asInt(), response.toString());
        assertFalse(response.path("error").path("message").asText().isBlank());
        assertFalse(response.toString().contains("java."), "class names leaked: " + response);
        assertFalse(response.toString().contains("Exception"), "class names leaked: " + response);
    }

    @Test
    void pingAnswersBeforeInitialize() throws Exception {
        JsonNode r = call("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}");
        assertEquals("pong", r.get("result").asText());
        assertEquals(7, r.get("id").asInt());
    }

    @Test
    void otherMethodsNeedInitialize() throws Exception {
        JsonNode r = call("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"get\",\"params\":{\"state_id\":\"x\"}}");
        assertError(r, ErrorCode.NOT_INITIALIZED);
        assertEquals("not_initialized", r.at("/error/data/kind").asText());
        assertEquals("a", r.get("id").asText());
    }

    @Test
    void malformedJsonIsAParseErrorWithANullId() throws Exception {
        JsonNode r = call("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\"");
        assertError(r, ErrorCode.PARSE_ERROR);
        assertTrue(r.get("id").isNull(), "id must be JSON null, not the string \"null\"");
    }

    @Test
    void nonObjectsAreInvalidRequests() throws Exception {
        assertError(call("42"), ErrorCode.INVALID_REQUEST);
        assertError(call("[1,2]"), ErrorCode.INVALID_REQUEST);
    }

    @Test
    void unknownMethodsAndBadParamsAreNamed() throws Exception {
        JsonNode unknown = call("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"frobnicate\"}");
        assertError(unknown, ErrorCode.METHOD_NOT_FOUND);
        assertTrue(unknown.at("/error/message").asText().contains("frobnicate"));
        JsonNode bad = call("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"get\",\"params\":{\"state\":1,\"x\":2}}");
        assertError(bad, ErrorCode.INVALID_PARAMS);
        assertTrue(bad.at("/error/message").asText().contains("get"));
    }

    @Test
    void badSettingsAreConfigurationErrorsThatNameTheSetting() throws Exception {
        JsonNode r = call("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"settings\":"
                + "{\"uri\":\"clickhouse://u:topsecret@h/db\",\"port\":\"http\"}}}");
        assertError(r, ErrorCode.CONFIGURATION);
        assertTrue(r.at("/error/message").asText().contains("'port'"));
        assertFalse(r.toString().contains("topsecret"));
    }

    @Test
    void notificationsGetNoResponse() throws Exception {
        assertEquals(null, call("{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}"));
    }

    @Test
    void requestsOfTheWrongShapeAreInvalidAndNoneEndsTheBridge() throws Exception {
        // No id that can be read: answered with a null id.
        for (String bad : new String[] {
                "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":false,\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1},\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":[],\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":1,\"params\":\"bar\"}"}) {
            JsonNode r = call(bad);
            assertError(r, ErrorCode.INVALID_REQUEST);
            assertTrue(r.get("id").isNull(), bad + " -> " + r);
            assertEquals("2.0", r.get("jsonrpc").asText());
        }
        // An id that can be read: answered with it, exactly as sent, as a client matches answers by id.
        for (String[] bad : new String[][] {
                {"1", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":\"x\"}"},
                {"12345678901234567890123", "{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890123,\"method\":\"ping\",\"params\":3}"},
                {"\"a\"", "{\"jsonrpc\":\"1.0\",\"id\":\"a\",\"method\":\"ping\"}"},
                {"7", "{\"id\":7,\"method\":\"ping\"}"},
                {"null", "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":5}"}}) {
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            dispatcher.write(dispatcher.handle(bad[1].getBytes(StandardCharsets.UTF_8)), out);
            String written = out.toString(StandardCharsets.UTF_8);
            assertError(json.readTree(written), ErrorCode.INVALID_REQUEST);
            assertTrue(written.contains("\"id\":" + bad[0] + "}") || written.contains("\"id\":" + bad[0] + ","),
                    bad[1] + " -> " + written);
        }
        assertEquals("pong", call("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}").get("result").asText());
    }

    @Test
    void everyValidIdComesBackExactlyAsSent() throws Exception {
        for (String id : new String[] {"null", "0", "-7", "1180591620717411315769", "12345678901234567890123", "1e400",
                "2.5", "\"x\"", "\"\""}) {
            JsonNode response = dispatcher.handle(("{\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"method\":\"ping\"}")
                    .getBytes(StandardCharsets.UTF_8));
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            dispatcher.write(response, out);
            String text = out.toString(StandardCharsets.UTF_8);
            assertTrue(text.contains("\"id\":" + id), id + " -> " + text);
            assertEquals("pong", json.readTree(text).get("result").asText());
        }
    }

    @Test
    void notificationsAreNeverAnsweredEvenWhenTheyFail() throws Exception {
        assertEquals(null, call("{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}"));
        assertEquals(null, call("{\"jsonrpc\":\"2.0\",\"method\":\"frobnicate\"}"));
        assertEquals(null, call("{\"jsonrpc\":\"2.0\",\"method\":\"get\",\"params\":{\"state_id\":\"x\"}}"));
    }

    @Test
    void parseErrorsNameNoLibrarySetting() throws Exception {
        for (String bad : new String[] {"{", "{\"a\":", "[" .repeat(10_000), "nul"}) {
            JsonNode r = call(bad);
            assertError(r, ErrorCode.PARSE_ERROR);
            String message = r.at("/error/message").asText();
            assertFalse(message.contains("StreamReadFeature") || message.contains("StreamReadConstraints")
                    || message.contains("Source"), message);
        }
        assertTrue(call("[".repeat(10_000)).at("/error/message").asText().contains("nests deeper than"));
        assertTrue(call("{").at("/error/message").asText().endsWith("at the end of the line)."));
        assertTrue(call("{\"a\" x}").at("/error/message").asText().endsWith("at character 6)."),
                call("{\"a\" x}").at("/error/message").asText());
    }

    @Test
    void aStateNestedAThousandDeepIsRead() throws Exception {
        String deep = "{\"a\":".repeat(1000) + "1" + "}".repeat(1000);
        JsonNode r = call("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"set\",\"params\":{\"state_id\":"
                + "\"x\",\"partial\":{},\"completed\":" + deep + "}}");
        assertError(r, ErrorCode.NOT_INITIALIZED); // read and dispatched: it got as far as the store
    }
}
