package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.exc.StreamConstraintsException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectWriter;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.googlecode.jsonrpc4j.ErrorResolver.JsonError;
import com.googlecode.jsonrpc4j.JsonResponse;
import com.googlecode.jsonrpc4j.JsonRpcBasicServer;
import io.github.chstate.bridge.error.ErrorCode;

import java.io.IOException;
import java.io.OutputStream;

/** One framed message in, its response out (none for a notification). jsonrpc4j does the dispatch. */
public final class Dispatcher {
    private static final String STAND_IN_ID = "request";
    private final ObjectMapper json;
    private final MessageReader reader;
    private final ObjectWriter writer;
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
        this.reader = new MessageReader(json);
        // The framing flushes once per response, after its newline; the stream stays open.
        this.writer = json.writer().without(SerializationFeature.FLUSH_AFTER_WRITE_VALUE)
                .without(JsonGenerator.Feature.FLUSH_PASSED_TO_STREAM).without(JsonGenerator.Feature.AUTO_CLOSE_TARGET);
        this.server = new Server(json, service);
        server.setErrorResolver(new ErrorMapper());
        server.setAllowLessParams(true);
        server.setShouldLogInvocationErrors(false);
    }

    /**
     * The response to one message; null for a notification, which gets none. A request's id is answered exactly as
     * it came; jsonrpc4j sees a stand-in, as it would drop a null id and change a number beyond 64 bits.
     */
    public JsonNode handle(byte[] message) throws IOException {
        return handle(message, message.length);
    }

    /** {@link #handle(byte[])} of {@code message[0, length)}. */
    public JsonNode handle(byte[] message, int length) throws IOException {
        JsonNode request;
        try {
            request = reader.read(message, length);
        } catch (StreamConstraintsException e) {
            return errorResponse(ErrorCode.PARSE_ERROR, "Parse error: the message nests deeper than "
                    + Json.MAX_NESTING + " levels, more than this bridge takes.");
        } catch (JsonProcessingException e) {
            return errorResponse(ErrorCode.PARSE_ERROR, "Parse error: the message is not valid JSON ("
                    + withoutSource(e.getOriginalMessage()) + ", " + where(e.getLocation(), length) + ").");
        } catch (OutOfMemoryError e) {
            return errorResponse(ErrorCode.INTERNAL, ErrorMapper.outOfMemory(length));
        }
        String problem = request == null ? "expected one JSON-RPC 2.0 request object per line"
                : RequestShape.problem(request);
        if (problem != null) {
            ObjectNode response = errorResponse(ErrorCode.INVALID_REQUEST, "Invalid request: " + problem + ".");
            if (request != null && RequestShape.isId(request.get("id"))) {
                response.set("id", request.get("id")); // a client matches answers by id
            }
            return response;
        }
        JsonNode id = request.get("id");
        ((ObjectNode) request).put("id", STAND_IN_ID);
        JsonNode response = server.handle(request);
        if (id == null || response == null || response.isNull() || response.isMissingNode()) {
            return null; // a notification is never answered, even when it fails
        }
        ((ObjectNode) response).set("id", id);
        explainDispatchError(request, response);
        return response;
    }

    /** Where in the line the parser stopped; Jackson counts bytes of a byte source, and -1 at its end. */
    private static String where(JsonLocation location, int length) {
        long at = location.getCharOffset() >= 0 ? location.getCharOffset() : location.getByteOffset();
        return at < 0 || at >= length ? "at the end of the line" : "at character " + (at + 1);
    }

    /** Jackson's message without its "[Source: …]" part, which names its own settings. */
    private static String withoutSource(String message) {
        int source = message.indexOf(" (start marker at [Source");
        if (source < 0) {
            source = message.indexOf("[Source");
        }
        return (source < 0 ? message : message.substring(0, source)).strip();
    }

    /** The response to a message longer than the framing takes; it was not read, so its id is unknown. */
    public JsonNode tooLarge(long maxMessageBytes) {
        return errorResponse(ErrorCode.INVALID_REQUEST, "The request is larger than this bridge takes: "
                + maxMessageBytes / (1 << 20) + " MB, a quarter of its Java heap. Nothing was stored. For states this "
                + "large, give the bridge more memory: " + ErrorMapper.MORE_MEMORY);
    }

    /** Writes a response to {@code out}, a state's text straight from its bytes ({@code StatePart}). */
    public void write(JsonNode response, OutputStream out) throws IOException {
        writer.writeValue(out, response);
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
                    "Unknown method '" + method + "'; docs/how-it-works.md, Protocol, lists the methods.");
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

    private ObjectNode errorResponse(ErrorCode code, String message) {
        ObjectNode response = json.createObjectNode().put("jsonrpc", "2.0");
        response.putNull("id");
        replaceError(response, code, message);
        return response;
    }
}
