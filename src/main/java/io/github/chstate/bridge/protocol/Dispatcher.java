package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.googlecode.jsonrpc4j.ErrorResolver.JsonError;
import com.googlecode.jsonrpc4j.JsonRpcBasicServer;
import io.github.chstate.bridge.ErrorCode;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/** One framed message in, its response out (empty for a notification). jsonrpc4j does the dispatch. */
public final class Dispatcher {
    private final ObjectMapper json;
    private final JsonRpcBasicServer server;

    public Dispatcher(ObjectMapper json, BridgeApi service) {
        this.json = json;
        this.server = new JsonRpcBasicServer(json, service, BridgeApi.class);
        server.setErrorResolver(new ErrorMapper());
        server.setAllowLessParams(true);
        server.setShouldLogInvocationErrors(false);
    }

    public byte[] handle(byte[] message) throws IOException {
        JsonNode request;
        try {
            request = json.readTree(message);
        } catch (IOException e) {
            return errorResponse(ErrorCode.PARSE_ERROR, "Parse error: the message is not valid JSON.");
        }
        if (request == null || !(request.isObject() || request.isArray())) {
            return errorResponse(ErrorCode.INVALID_REQUEST, "Invalid request: expected a JSON-RPC 2.0 request object.");
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        server.handleRequest(new ByteArrayInputStream(message), out);
        return trim(out.toByteArray());
    }

    private byte[] errorResponse(ErrorCode code, String message) throws IOException {
        JsonError error = ErrorMapper.error(code, message);
        ObjectNode response = json.createObjectNode().put("jsonrpc", "2.0");
        response.putObject("error").put("code", error.code).put("message", error.message)
                .set("data", json.valueToTree(error.data));
        response.putNull("id");
        return json.writeValueAsBytes(response);
    }

    private static byte[] trim(byte[] bytes) {
        String text = new String(bytes, StandardCharsets.UTF_8).strip();
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
