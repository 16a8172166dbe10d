package io.github.chstate.bridge.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StoredState;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;

/**
 * One contender of {@link LockIntegrationTest}, in a process of its own: reads settings (JSON) from stdin, takes the
 * lock {@code args[1]} times on state id {@code args[0]}, each time adding one to a counter in that id's state, and
 * prints "enter exit" (System.nanoTime, one clock for all processes on Linux) for each critical section. With
 * {@code args[1]} = "hold" it takes the lock once, prints when it asked for it, and holds it until it is killed. With {@code args[2]},
 * a KeeperMap table that all servers share, it also adds one to the counter there, under the lock.
 */
public final class LockStressWorker {
    public static void main(String[] args) throws Exception {
        ObjectMapper json = Json.mapper();
        @SuppressWarnings("unchecked")
        Map<String, Object> settings = json.readValue(System.in, Map.class);
        if (args[1].equals("hold")) { // takes the lock, says since when at the latest, and keeps it until killed
            BridgeService bridge = new BridgeService(json);
            bridge.initialize(settings);
            long before = System.nanoTime();
            bridge.acquireLock(args[0], 0.05);
            System.out.println(before);
            System.out.flush();
            Thread.sleep(Long.MAX_VALUE);
        }
        int rounds = Integer.parseInt(args[1]);
        String shared = args.length > 2 && !args[2].isEmpty() ? args[2] : null;
        StringBuilder out = new StringBuilder();
        try (BridgeService bridge = new BridgeService(json);
             Connection jdbc = shared == null ? null : ClickHouseEndpoint.jdbc(settings)) {
            bridge.initialize(settings);
            for (int i = 0; i < rounds; i++) {
                String token = bridge.acquireLock(args[0], 0.05);
                long enter = System.nanoTime();
                StoredState counter = bridge.get(args[0]); // Meltano's update: get, merge, set, all under the lock
                int count = counter == null ? 0 : json.readTree(counter.completed().text()).path("count").asInt();
                bridge.set(args[0], null, StatePart.of("{\"count\":" + (count + 1) + "}"));
                if (jdbc != null) {
                    increment(jdbc, shared);
                }
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

    /** A read, then a plain (not compare-and-set) write of a counter all servers share: only the lock keeps it exact. */
    private static void increment(Connection jdbc, String table) throws SQLException {
        try (Statement s = jdbc.createStatement()) {
            long n = 0;
            try (ResultSet rs = s.executeQuery("SELECT n FROM " + table + " WHERE k = 'count'")) {
                if (rs.next()) {
                    n = rs.getLong(1);
                }
            }
            s.execute("INSERT INTO " + table + " VALUES ('count', " + (n + 1) + ")");
        }
    }
}
