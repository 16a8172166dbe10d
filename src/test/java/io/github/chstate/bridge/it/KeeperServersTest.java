package io.github.chstate.bridge.it;

import org.junit.jupiter.api.Test;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The servers of {@link ClickHouseEndpoint#keeperServers()} share KeeperMap tables, and strict mode refuses a second create. */
class KeeperServersTest {
    @Test
    void twoServersSeeOneKeeperMapAndAStrictInsertOfAnExistingKeyFails() throws Exception {
        List<Map<String, Object>> servers = ClickHouseEndpoint.keeperServers();
        assertTrue(servers.size() >= 2, servers.size() + " servers");
        String path = "/it_" + UUID.randomUUID().toString().replace("-", "");
        List<Connection> connections = new ArrayList<>();
        try {
            for (Map<String, Object> server : servers.subList(0, 2)) {
                Connection c = ClickHouseEndpoint.jdbc(server);
                connections.add(c);
                run(c, "CREATE TABLE IF NOT EXISTS default.km" + path.substring(4)
                        + " (k String, v String) ENGINE = KeeperMap('" + path + "') PRIMARY KEY k");
            }
            String table = "default.km" + path.substring(4);
            run(connections.get(0), "INSERT INTO " + table + " SETTINGS keeper_map_strict_mode = 1 VALUES ('a', 'first')");
            SQLException taken = assertThrows(SQLException.class, () -> run(connections.get(1),
                    "INSERT INTO " + table + " SETTINGS keeper_map_strict_mode = 1 VALUES ('a', 'second')"));
            assertTrue(taken.getMessage().contains("Code: 999"), taken.getMessage());
            for (Connection c : connections) {
                try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT v FROM " + table)) {
                    assertTrue(rs.next());
                    assertEquals("first", rs.getString(1));
                }
            }
        } finally {
            for (Connection c : connections) {
                c.close();
            }
        }
    }

    private static void run(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute(sql);
        }
    }
}
