package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.googlecode.jsonrpc4j.ErrorResolver.JsonError;
import com.googlecode.jsonrpc4j.JsonResponse;
import com.googlecode.jsonrpc4j.JsonRpcBasicServer;
import io.github.chstate.bridge.ErrorCode;

import java.io.IOException;

/** One framed message in, its response out (empty for a notification). jsonrpc4j does the dispatch. */
public final class Dispatcher {
    private static final byte[] NO_RESPONSE = new byte[0];

    private final ObjectMapper json;
    private final Server server;

    /** Exposes jsonrpc4j's tree-in, tree-out entry point, so that we parse each message once and frame it ourselves. */
    private static final class Server extends JsonRpcBasicServer {
        Server(ObjectMapper json, BridgeApi service) {
            super(json, service, BridgeApi.class);
        }

        JsonNode handle(JsonNode request) throws IOException {
            JsonResponse response = handleJsonNodeRequest(request);
            return response == null ? null : response.getResponse();
        }
    }

    public Dispatcher(ObjectMapper json, BridgeApi service) {
        this.json = json;
        this.server = new Server(json, service);
        server.setErrorResolver(new ErrorMapper());
        server.setAllowLessParams(true);
        server.setShouldLogInvocationErrors(false);
    }

    public byte[] handle(byte[] message) throws IOException {
        JsonNode request;
        try {
            request = json.readTree(message);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            return errorResponse(ErrorCode.PARSE_ERROR, "Parse error: the message is not valid JSON ("
                    + e.getOriginalMessage() + ").");
        }
        if (request == null || !request.isObject()) {
            return errorResponse(ErrorCode.INVALID_REQUEST, "Invalid request: expected one JSON-RPC 2.0 request object per line.");
        }
        JsonNode response = server.handle(request);
        if (response == null || response.isNull() || response.isMissingNode()) {
            return NO_RESPONSE;
        }
        explainDispatchError(request, response);
        return json.writeValueAsBytes(response);
    }

    /** jsonrpc4j answers an unknown method or unusable parameters itself, tersely: say which and what to do. */
    private void explainDispatchError(JsonNode request, JsonNode response) {
        JsonNode error = response.path("error");
        if (!error.isObject() || error.has("data")) {
            return;
        }
        String method = request.path("method").asText("");
        int code = error.path("code").asInt();
        if (code == ErrorCode.METHOD_NOT_FOUND.number()) {
            replaceError(response, ErrorCode.METHOD_NOT_FOUND,
                    "Unknown method '" + method + "'; the README's protocol reference lists the methods.");
        } else if (code == ErrorCode.INVALID_PARAMS.number()) {
            replaceError(response, ErrorCode.INVALID_PARAMS,
                    "Invalid parameters for '" + method + "': pass an object with the documented names and types.");
        } else if (code == ErrorCode.INVALID_REQUEST.number()) {
            replaceError(response, ErrorCode.INVALID_REQUEST,
                    "Invalid request: a JSON-RPC 2.0 request needs \"jsonrpc\": \"2.0\", a string \"method\" and an id.");
        }
    }

    private void replaceError(JsonNode response, ErrorCode code, String message) {
        JsonError error = ErrorMapper.error(code, message);
        ((ObjectNode) response).putObject("error").put("code", error.code).put("message", error.message)
                .set("data", json.valueToTree(error.data));
    }

    private byte[] errorResponse(ErrorCode code, String message) throws IOException {
        ObjectNode response = json.createObjectNode().put("jsonrpc", "2.0");
        response.putNull("id");
        replaceError(response, code, message);
        return json.writeValueAsBytes(response);
    }
}
