package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.Main;
import org.junit.jupiter.api.Test;

import java.io.File;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The bridge as the shim runs it: a process speaking JSON-RPC lines on stdin/stdout. */
class BridgeProcessTest {
    private final ObjectMapper json = new ObjectMapper();

    private File stderr;

    private Process start() throws Exception {
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        stderr = File.createTempFile("bridge", ".stderr");
        stderr.deleteOnExit();
        return new ProcessBuilder(java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=debug", "-cp",
                System.getProperty("java.class.path"), Main.class.getName())
                .redirectError(stderr).start();
    }

    private String request(int id, String method, Object params) throws Exception {
        Map<String, Object> m = new java.util.LinkedHashMap<>(Map.of("jsonrpc", "2.0", "id", id, "method", method));
        if (params != null) {
            m.put("params", params);
        }
        return json.writeValueAsString(m);
    }

    @Test
    void stdoutCarriesOnlyResponsesAndEofEndsTheProcess() throws Exception {
        String secret = "pw-" + System.nanoTime();
        Map<String, Object> good = ClickHouseEndpoint.settings();
        Map<String, Object> wrong = new java.util.HashMap<>(good);
        wrong.put("password", secret);
        List<String> lines = List.of(
                request(1, "ping", null),
                request(2, "initialize", Map.of("settings", wrong)),
                "this is not json",
                request(3, "initialize", Map.of("settings", good)),
                request(4, "set", Map.of("state_id", "p:1", "partial", Map.of(), "completed", Map.of("k", "v"))),
                request(5, "get", Map.of("state_id", "p:1")),
                request(6, "acquire_lock", Map.of("state_id", "p:1")),
                request(7, "get_state_ids", Map.of("pattern", "p:*")));
        Process p = start();
        try (OutputStream in = p.getOutputStream()) {
            // all at once, pipelined, before reading anything
            in.write((String.join("\n", lines) + "\n").getBytes(StandardCharsets.UTF_8));
            in.flush();
            String[] out = readLines(p, 7);
            List<JsonNode> responses = new ArrayList<>();
            for (String line : out) {
                responses.add(json.readTree(line)); // every stdout line is one JSON-RPC message
            }
            assertEquals("pong", responses.get(0).get("result").asText());
            assertEquals(-32003, responses.get(1).at("/error/code").asInt(), responses.get(1).toString());
            assertEquals(-32700, responses.get(2).at("/error/code").asInt());
            assertEquals("1", responses.get(3).at("/result/protocol_version").asText());
            assertEquals("v", responses.get(5).at("/result/completed/k").asText());
            assertFalse(responses.get(6).get("result").asText().isEmpty());
            assertEquals("p:1", responses.get(7).at("/result/0").asText());
            in.close();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "bridge did not exit after EOF");
            assertEquals(0, p.exitValue());
            assertEquals("", new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip());
            String log = java.nio.file.Files.readString(stderr.toPath());
            assertFalse(log.contains(secret), "password in the log");
            assertTrue(log.contains("DEBUG"), "debug logging reaches stderr");
            assertFalse(String.join(" ", p.info().arguments().orElse(new String[0])).contains(secret));
        } finally {
            p.destroyForcibly();
        }
    }

    private static String[] readLines(Process p, int lastId) throws Exception {
        java.io.BufferedReader reader = new java.io.BufferedReader(
                new java.io.InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        List<String> lines = new ArrayList<>();
        String line;
        while (lines.size() < lastId + 1 && (line = reader.readLine()) != null) {
            lines.add(line);
        }
        return lines.toArray(new String[0]);
    }

    @Test
    void shutdownAnswersAndExits() throws Exception {
        Process p = start();
        try (OutputStream in = p.getOutputStream()) {
            in.write((request(1, "shutdown", null) + "\n").getBytes(StandardCharsets.UTF_8));
            in.flush();
            assertTrue(p.waitFor(5, TimeUnit.SECONDS));
            assertEquals(0, p.exitValue());
            JsonNode r = json.readTree(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip());
            assertTrue(r.has("result"));
        } finally {
            p.destroyForcibly();
        }
    }
}
