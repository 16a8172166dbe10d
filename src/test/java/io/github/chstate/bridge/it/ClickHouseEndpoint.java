package io.github.chstate.bridge.it;

import com.clickhouse.jdbc.Driver;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.clickhouse.ClickHouseContainer;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;

/**
 * The ClickHouse the integration tests run against: {@code CLICKHOUSE_URL} (http[s]://user:password@host:port) if set,
 * else a Testcontainers ClickHouse where Docker runs. With neither, tests fail and say so: they are never skipped.
 * <p>
 * Tests of KeeperMap across servers use {@link #keeperServers()}: {@code CLICKHOUSE_KEEPER_URLS} (two or more URLs,
 * comma-separated, of servers on one Keeper) if set, else two local chDB servers and a ZooKeeper that
 * {@code tests-e2e/start-clickhouse.sh --keeper} starts for this JVM and {@code stop-clickhouse.sh} stops at its exit.
 */
public final class ClickHouseEndpoint {
    private static Map<String, Object> base;
    private static List<Map<String, Object>> keeperBases;

    private ClickHouseEndpoint() {
    }

    /** Settings for {@code initialize}, with a schema of its own so that tests do not see each other's tables. */
    public static synchronized Map<String, Object> settings() {
        if (base == null) {
            base = discover();
        }
        Map<String, Object> settings = new HashMap<>(base);
        settings.put("schema", "it_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12));
        return settings;
    }

    /** Settings for each of two or more servers that share KeeperMap tables, each with the same new schema. */
    public static synchronized List<Map<String, Object>> keeperServers() {
        if (keeperBases == null) {
            String urls = System.getenv("CLICKHOUSE_KEEPER_URLS");
            keeperBases = (urls != null && !urls.isBlank() ? List.of(urls.split(",")) : startLocalKeeperServers())
                    .stream().map(ClickHouseEndpoint::fromUrl).toList();
        }
        String schema = "it_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
        return keeperBases.stream().map(b -> {
            Map<String, Object> settings = new HashMap<>(b);
            settings.put("schema", schema);
            return settings;
        }).toList();
    }

    private static List<String> startLocalKeeperServers() {
        try {
            Path dir = Files.createTempDirectory("it-keeper-");
            ProcessBuilder start = new ProcessBuilder("tests-e2e/start-clickhouse.sh", "--keeper", "--servers", "2",
                    dir.toString()).redirectError(ProcessBuilder.Redirect.INHERIT);
            if (System.getenv("PYTHON") == null && Files.isExecutable(Path.of(".venv/bin/python"))) {
                start.environment().put("PYTHON", ".venv/bin/python");
            }
            Runtime.getRuntime().addShutdownHook(new Thread(() -> stopLocalKeeperServers(dir)));
            Process process = start.start();
            String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (process.waitFor() != 0) {
                throw new IllegalStateException("tests-e2e/start-clickhouse.sh --keeper failed (its error is above); "
                        + "it needs a Python with tests-e2e/requirements.txt (PYTHON=…), or set CLICKHOUSE_KEEPER_URLS");
            }
            for (String line : output.split("\n")) {
                if (line.startsWith("export CLICKHOUSE_KEEPER_URLS=")) {
                    return List.of(line.substring(line.indexOf('=') + 1).trim().split(","));
                }
            }
            throw new IllegalStateException("start-clickhouse.sh printed no CLICKHOUSE_KEEPER_URLS: " + output);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static void stopLocalKeeperServers(Path dir) {
        try {
            new ProcessBuilder("tests-e2e/stop-clickhouse.sh", dir.toString()).inheritIO().start().waitFor();
        } catch (IOException | InterruptedException e) {
            System.err.println("could not stop the local KeeperMap servers in " + dir + ": " + e);
        }
    }

    private static Map<String, Object> discover() {
        String url = System.getenv("CLICKHOUSE_URL");
        if (url != null && !url.isBlank()) {
            return fromUrl(url);
        }
        if (dockerAvailable()) {
            ClickHouseContainer container = new ClickHouseContainer("clickhouse/clickhouse-server:25.8");
            container.start();
            return fromUrl("http://" + container.getUsername() + ":" + container.getPassword() + "@"
                    + container.getHost() + ":" + container.getMappedPort(8123));
        }
        throw new IllegalStateException("No ClickHouse for the integration tests: set CLICKHOUSE_URL "
                + "(e.g. http://default:@127.0.0.1:8123, from `tests-e2e/start-clickhouse.sh`) or run Docker for Testcontainers.");
    }

    private static boolean dockerAvailable() {
        try {
            return DockerClientFactory.instance().isDockerAvailable();
        } catch (RuntimeException e) {
            return false;
        }
    }

    /** A plain JDBC connection to a server of {@link #settings()} or {@link #keeperServers()}, for checks beside the bridge. */
    public static Connection jdbc(Map<String, Object> server) throws SQLException {
        Properties credentials = new Properties();
        credentials.setProperty("user", (String) server.get("user"));
        credentials.setProperty("password", (String) server.get("password"));
        String scheme = Boolean.TRUE.equals(server.get("secure")) ? "https" : "http";
        return new Driver().connect("jdbc:clickhouse:" + scheme + "://" + server.get("host") + ":" + server.get("port")
                + "/default", credentials);
    }

    /** Whether the server has KeeperMap tables: without keeper_map_path_prefix, creating one fails with code 36. */
    public static boolean hasKeeperMap(Map<String, Object> server) throws SQLException {
        String table = "default.keeper_probe_" + UUID.randomUUID().toString().replace("-", "");
        try (Connection c = jdbc(server); Statement s = c.createStatement()) {
            s.execute("CREATE TABLE " + table + " (k String) ENGINE = KeeperMap('/" + table + "') PRIMARY KEY k");
            s.execute("DROP TABLE " + table);
            return true;
        } catch (SQLException e) {
            if (String.valueOf(e.getMessage()).contains("keeper_map_path_prefix")) {
                return false;
            }
            throw e;
        }
    }

    static Map<String, Object> fromUrl(String url) {
        URI uri = URI.create(url);
        Map<String, Object> s = new HashMap<>();
        s.put("host", uri.getHost());
        s.put("secure", "https".equals(uri.getScheme()));
        s.put("port", uri.getPort() > 0 ? uri.getPort() : "https".equals(uri.getScheme()) ? 8443 : 8123);
        s.put("database", "default");
        String userInfo = uri.getRawUserInfo();
        String user = "default";
        String password = "";
        if (userInfo != null) {
            int colon = userInfo.indexOf(':');
            user = URLDecoder.decode(colon < 0 ? userInfo : userInfo.substring(0, colon), StandardCharsets.UTF_8);
            password = colon < 0 ? "" : URLDecoder.decode(userInfo.substring(colon + 1), StandardCharsets.UTF_8);
        }
        s.put("user", user);
        s.put("password", password);
        return s;
    }
}
