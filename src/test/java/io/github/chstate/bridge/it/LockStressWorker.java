package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.store.StoredState;

import java.util.Map;

/**
 * One contender of {@link LockIntegrationTest}, in a process of its own: reads settings (JSON) from stdin, takes the
 * lock {@code args[1]} times on state id {@code args[0]}, each time adding one to a counter in that id's state, and
 * prints "enter exit" (System.nanoTime, one clock for all processes on Linux) for each critical section.
 */
public final class LockStressWorker {
    public static void main(String[] args) throws Exception {
        ObjectMapper json = Json.mapper();
        @SuppressWarnings("unchecked")
        Map<String, Object> settings = json.readValue(System.in, Map.class);
        int rounds = Integer.parseInt(args[1]);
        StringBuilder out = new StringBuilder();
        try (BridgeService bridge = new BridgeService(json)) {
            bridge.initialize(settings);
            for (int i = 0; i < rounds; i++) {
                String token = bridge.acquireLock(args[0], 0.05);
                long enter = System.nanoTime();
                StoredState counter = bridge.get(args[0]); // Meltano's update: get, merge, set, all under the lock
                int count = counter == null ? 0 : counter.completed().path("count").asInt();
                bridge.set(args[0], null, json.createObjectNode().put("count", count + 1));
                long exit = System.nanoTime();
                bridge.releaseLock(token);
                out.append(enter).append(' ').append(exit).append('\n');
            }
        }
        System.err.flush();
        System.out.print(out);
        System.out.flush();
        System.exit(0);
    }
}
