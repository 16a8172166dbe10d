package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * What JSON-RPC 2.0 asks of a request object before it is dispatched: {@code "jsonrpc": "2.0"}, a string method,
 * params that are an object or an array when present, and an id that is a string, a number or null when present
 * (without one, the message is a notification).
 */
final class RequestShape {
    private RequestShape() {
    }

    /** What is wrong with the request, or null when it may be dispatched. */
    static String problem(JsonNode request) {
        if (!request.isObject()) {
            return "expected one JSON-RPC 2.0 request object per line";
        }
        if (!"2.0".equals(request.path("jsonrpc").textValue())) {
            return "\"jsonrpc\" must be \"2.0\"";
        }
        if (!request.path("method").isTextual()) {
            return "\"method\" must be a string";
        }
        JsonNode params = request.get("params");
        if (params != null && !params.isObject() && !params.isArray()) {
            return "\"params\" must be an object or an array";
        }
        JsonNode id = request.get("id");
        if (id != null && !id.isNull() && !isId(id)) {
            return "\"id\" must be a string, a number or null";
        }
        return null;
    }

    /** Whether {@code id} is a string or a number id (as {@link MessageReader} keeps one): an id a client can match. */
    static boolean isId(JsonNode id) {
        return id != null && (id.isTextual() || MessageReader.isNumberId(id));
    }
}
