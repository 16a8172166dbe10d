package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class StdioServerTest {
    private final ObjectMapper json = Json.mapper();

    /** Records what was written at each flush, to prove every response is flushed on its own. */
    private static final class FlushRecorder extends OutputStream {
        final ByteArrayOutputStream pending = new ByteArrayOutputStream();
        final List<String> flushed = new ArrayList<>();

        @Override
        public void write(int b) {
            pending.write(b);
        }

        @Override
        public void flush() {
            flushed.add(pending.toString(StandardCharsets.UTF_8));
            pending.reset();
        }
    }

    private FlushRecorder serve(String input, BridgeService service) throws IOException {
        return serve(new ByteArrayInputStream(input.getBytes(StandardCharsets.UTF_8)), service, Long.MAX_VALUE);
    }

    private FlushRecorder serve(InputStream in, BridgeService service, long maxMessageBytes) throws IOException {
        FlushRecorder out = new FlushRecorder();
        new StdioServer(in, out, new Dispatcher(json, service), service::shutdownRequested, maxMessageBytes).run();
        return out;
    }

    @Test
    void pipelinedMessagesAreAllAnsweredInOrderOnePerLineAndFlushed() throws Exception {
        StringBuilder in = new StringBuilder();
        for (int i = 0; i < 50; i++) {
            in.append("{\"jsonrpc\":\"2.0\",\"id\":").append(i).append(",\"method\":\"ping\"}\n");
        }
        in.append("\n   \n{broken\n{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\"}"); // last line without newline
        FlushRecorder out = serve(in.toString(), new BridgeService(json));
        assertEquals(52, out.flushed.size());
        for (int i = 0; i < 50; i++) {
            String line = out.flushed.get(i);
            assertTrue(line.endsWith("\n") && line.indexOf('\n') == line.length() - 1, line);
            assertEquals(i, json.readTree(line).get("id").asInt());
        }
        assertEquals(-32700, json.readTree(out.flushed.get(50)).at("/error/code").asInt());
        assertEquals(99, json.readTree(out.flushed.get(51)).get("id").asInt());
    }

    @Test
    void linesLongerThanTheReadBufferOrSplitAcrossReadsArriveWhole() throws Exception {
        String big = "x".repeat(200_000);
        String input = "{\"jsonrpc\":\"2.0\",\"id\":\"" + big + "\",\"method\":\"ping\"}\n"
                + "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        byte[] bytes = input.getBytes(StandardCharsets.UTF_8);
        InputStream trickle = new ByteArrayInputStream(bytes) {
            @Override
            public synchronized int read(byte[] b, int off, int len) {
                return super.read(b, off, Math.min(len, 7)); // as a pipe may deliver it
            }
        };
        FlushRecorder out = serve(trickle, new BridgeService(json), Long.MAX_VALUE);
        assertEquals(2, out.flushed.size());
        assertEquals(big, json.readTree(out.flushed.get(0)).get("id").asText());
        assertEquals(2, json.readTree(out.flushed.get(1)).get("id").asInt());
    }

    @Test
    void theLineBufferGrowsForALargeLineAndIsLeftBehindAfterIt() throws Exception {
        // 5 MB: more than the buffer the framing keeps between lines (4 MB); the lines after it are read into a new one
        String big = "y".repeat(5 << 20);
        String input = "{\"jsonrpc\":\"2.0\",\"id\":\"" + big + "\",\"method\":\"ping\"}\n"
                + "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n"
                + "{\"jsonrpc\":\"2.0\",\"id\":\"" + big + "z\",\"method\":\"ping\"}\n";
        FlushRecorder out = serve(new ByteArrayInputStream(input.getBytes(StandardCharsets.UTF_8)),
                new BridgeService(json), Long.MAX_VALUE);
        assertEquals(3, out.flushed.size());
        assertEquals(big, json.readTree(out.flushed.get(0)).get("id").asText());
        assertEquals(2, json.readTree(out.flushed.get(1)).get("id").asInt());
        assertEquals(big + "z", json.readTree(out.flushed.get(2)).get("id").asText());
    }

    @Test
    void aLineOverTheLimitIsRefusedWithoutBeingKeptAndTheNextIsServed() throws Exception {
        String big = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"set\",\"params\":{\"state_id\":\"x\",\"completed\":{\"s\":\""
                + "x".repeat(3 << 20) + "\"}}}\n";
        String input = big + "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n" + big; // the last one at the end of input
        FlushRecorder out = serve(new ByteArrayInputStream(input.getBytes(StandardCharsets.UTF_8)), new BridgeService(json), 2 << 20);
        assertEquals(3, out.flushed.size());
        for (int i : new int[] {0, 2}) {
            JsonNode refused = json.readTree(out.flushed.get(i));
            assertEquals(-32600, refused.at("/error/code").asInt(), refused.toString());
            assertTrue(refused.at("/error/message").asText().contains("larger than this bridge takes: 2 MB"), refused.toString());
            assertTrue(refused.at("/error/message").asText().contains("CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS=-Xmx"), refused.toString());
        }
        assertEquals("pong", json.readTree(out.flushed.get(1)).get("result").asText());
    }

    @Test
    void shutdownAnswersThenStops() throws Exception {
        FlushRecorder out = serve("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"shutdown\"}\n"
                + "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n", new BridgeService(json));
        assertEquals(1, out.flushed.size());
        JsonNode r = json.readTree(out.flushed.get(0));
        assertTrue(r.has("result") && r.get("result").isNull(), r.toString());
    }

    @Test
    void unicodeAndEscapedNewlinesSurviveFraming() throws Exception {
        FlushRecorder out = serve("{\"jsonrpc\":\"2.0\",\"id\":\"ünï\\n✓\",\"method\":\"ping\"}\n", new BridgeService(json));
        assertEquals("ünï\n✓", json.readTree(out.flushed.get(0)).get("id").asText());
    }

    /** Every hostile line from a black-box check, in one stream: each answered as JSON-RPC 2.0 says, then a ping. */
    @Test
    void everyMalformedLineGetsItsOneAnswerOrNoneAndTheBridgeServesOn() throws Exception {
        String[][] cases = {
                {"{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", "-32600"},
                {"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", "-32600"},
                {"{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}", "-32600"},
                {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":\"s\"}", "-32600 id 1"},
                {"{\"jsonrpc\":\"1.0\",\"id\":\"b\",\"method\":\"ping\"}", "-32600 id \"b\""},
                {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", "id null: pong"},
                {"{\"jsonrpc\":\"2.0\",\"method\":\"frobnicate\"}", null},
                {"{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890123,\"method\":\"ping\"}", "id 12345678901234567890123"},
                {"{", "-32700"},
                {"[".repeat(10_000), "-32700"},
                {"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}", "id 5"}};
        StringBuilder in = new StringBuilder();
        List<String> expected = new ArrayList<>();
        for (String[] c : cases) {
            in.append(c[0]).append('\n');
            if (c[1] != null) {
                expected.add(c[1]);
            }
        }
        FlushRecorder out = serve(in.toString(), new BridgeService(json));
        assertEquals(expected.size(), out.flushed.size(), String.join("", out.flushed));
        for (int i = 0; i < expected.size(); i++) {
            String line = out.flushed.get(i);
            JsonNode response = json.readTree(line);
            assertEquals("2.0", response.get("jsonrpc").asText(), line);
            String want = expected.get(i);
            if (want.startsWith("-")) { // an error; with the id when the request's can be read
                String[] codeAndId = want.split(" id ");
                assertEquals(Integer.parseInt(codeAndId[0]), response.at("/error/code").asInt(), line);
                assertTrue(codeAndId.length == 1 ? response.get("id").isNull()
                        : line.contains("\"id\":" + codeAndId[1] + ","), line);
            } else if (want.equals("id null: pong")) {
                assertTrue(response.get("id").isNull() && response.get("result").asText().equals("pong"), line);
            } else {
                assertTrue(line.contains("\"id\":" + want.substring(3) + ","), line);
                assertEquals("pong", response.get("result").asText(), line);
            }
        }
    }
}
