package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.googlecode.jsonrpc4j.JsonRpcMethod;
import com.googlecode.jsonrpc4j.JsonRpcParam;
import io.github.chstate.bridge.store.Checkup;
import io.github.chstate.bridge.store.StateHistory;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StateSurgery;
import io.github.chstate.bridge.store.StateVersion;
import io.github.chstate.bridge.store.StoredState;

import java.util.List;
import java.util.Map;

/** The methods of protocol version {@value #PROTOCOL_VERSION}; docs/how-it-works.md ("Protocol") documents each one. */
public interface BridgeApi {
    String PROTOCOL_VERSION = "1";

    @JsonRpcMethod("ping")
    String ping();

    @JsonRpcMethod("initialize")
    Map<String, Object> initialize(@JsonRpcParam("settings") Map<String, Object> settings,
                                   @JsonRpcParam("run") Map<String, Object> run);

    @JsonRpcMethod("migrate")
    Map<String, Object> migrate();

    @JsonRpcMethod("get")
    StoredState get(@JsonRpcParam("state_id") String stateId);

    /** Answers whether the state was kept back (written later, docs/how-it-works.md "Write interval"). */
    @JsonRpcMethod("set")
    boolean set(@JsonRpcParam("state_id") String stateId, @JsonRpcParam("partial") StatePart partial,
             @JsonRpcParam("completed") StatePart completed);

    @JsonRpcMethod("delete")
    void delete(@JsonRpcParam("state_id") String stateId);

    @JsonRpcMethod("get_state_ids")
    List<String> getStateIds(@JsonRpcParam("pattern") String pattern);

    @JsonRpcMethod("get_all")
    List<StoredState> getAll(@JsonRpcParam("pattern") String pattern);

    @JsonRpcMethod("set_all")
    int setAll(@JsonRpcParam("states") List<StoredState> states);

    @JsonRpcMethod("clear_all")
    long clearAll();

    @JsonRpcMethod("history")
    List<StateVersion> history(@JsonRpcParam("state_id") String stateId, @JsonRpcParam("limit") Integer limit);

    @JsonRpcMethod("change_streams")
    StateHistory.Surgery changeStreams(@JsonRpcParam("state_id") String stateId, @JsonRpcParam("action") String action,
                                       @JsonRpcParam("streams") List<String> streams, @JsonRpcParam("at") String at,
                                       @JsonRpcParam("value") JsonNode value, @JsonRpcParam("execute") Boolean execute,
                                       @JsonRpcParam("force") Boolean force);

    @JsonRpcMethod("diff")
    List<StateSurgery.Change> diff(@JsonRpcParam("state_id") String stateId, @JsonRpcParam("version") String version);

    @JsonRpcMethod("acquire_lock")
    String acquireLock(@JsonRpcParam("state_id") String stateId, @JsonRpcParam("retry_seconds") Double retrySeconds);

    @JsonRpcMethod("release_lock")
    void releaseLock(@JsonRpcParam("token") String token);

    @JsonRpcMethod("runs")
    List<Map<String, Object>> runs();

    @JsonRpcMethod("check")
    List<Checkup.Line> check(@JsonRpcParam("settings") Map<String, Object> settings);

    @JsonRpcMethod("flush")
    void flush();

    @JsonRpcMethod("shutdown")
    void shutdown();
}
