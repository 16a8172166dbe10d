package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.googlecode.jsonrpc4j.ErrorResolver;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.reflect.Method;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Maps what a method threw to a JSON-RPC error with one of our stable codes. The message is for the user; Java class
 * names and stack traces stay in the log (stderr), where debug logging shows them.
 */
public final class ErrorMapper implements ErrorResolver {
    static final String MORE_MEMORY = "set CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS=-Xmx2g (or more) where meltano runs.";
    private static final Logger log = LoggerFactory.getLogger(ErrorMapper.class);

    @Override
    public JsonError resolveError(Throwable thrown, Method method, List<JsonNode> arguments) {
        String name = method == null ? "?" : method.getName();
        if (thrown instanceof BridgeException e) {
            log.debug("{} failed: {}", name, e.getMessage(), e);
            return error(e.code(), e.getMessage());
        }
        if (thrown instanceof IllegalArgumentException) {
            log.debug("{} got invalid parameters", name, thrown);
            return error(ErrorCode.INVALID_PARAMS, "Invalid parameters: " + thrown.getMessage());
        }
        if (thrown instanceof OutOfMemoryError) {
            log.debug("{} ran out of memory", name, thrown);
            return error(ErrorCode.INTERNAL, outOfMemory());
        }
        log.error("{} failed unexpectedly", name, thrown);
        return error(ErrorCode.INTERNAL, "Internal bridge error; the bridge log (stderr) has the details.");
    }

    /** Out of memory reading a message of {@code bytes}: it was not necessarily a state. */
    static String outOfMemory(long bytes) {
        return "The bridge ran out of memory (its Java heap is " + Runtime.getRuntime().maxMemory() / (1 << 20)
                + " MB) reading a message of " + bytes / (1 << 20) + " MB; nothing was stored. If it carried a state "
                + "this large, give the bridge more memory: " + MORE_MEMORY;
    }

    static String outOfMemory() {
        return "The bridge ran out of memory (its Java heap is " + Runtime.getRuntime().maxMemory() / (1 << 20)
                + " MB) on a state this large; the call failed and stored nothing. Give it more memory: " + MORE_MEMORY;
    }

    public static JsonError error(ErrorCode code, String message) {
        return new JsonError(code.number(), message, Map.of("kind", code.name().toLowerCase(Locale.ROOT)));
    }
}
