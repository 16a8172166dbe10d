package io.github.chstate.bridge.it;

import com.clickhouse.jdbc.Driver;
import io.github.chstate.bridge.clickhouse.ServerErrors;
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
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.stream.Stream;

/**
 * The ClickHouse the integration tests run against: {@code CLICKHOUSE_URL} (http[s]://user:password@host:port) if set,
 * else a Testcontainers ClickHouse where Docker runs, else a local chDB server that
 * {@code tests-e2e/start-clickhouse.sh} starts for this JVM (it needs {@code tests-e2e/setup.sh} run once) and
 * {@code stop-clickhouse.sh} stops at its exit. When none of these works, tests fail and say so: never skipped.
 * <p>
 * Tests of KeeperMap across servers use {@link #keeperServers()}: {@code CLICKHOUSE_KEEPER_URLS} (two or more URLs,
 * comma-separated, of servers on one Keeper) if set, else two local chDB servers on a ZooKeeper, started the same way.
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
        return List.of(startLocal("CLICKHOUSE_KEEPER_URLS", "--keeper", "--servers", "2").split(","));
    }

    /** Runs start-clickhouse.sh with OPTIONS and returns the value it exports as VARIABLE. */
    private static String startLocal(String variable, String... options) {
        try {
            Path dir = Files.createTempDirectory(Path.of(System.getProperty("java.io.tmpdir")), "it-clickhouse-");
            List<String> command = new ArrayList<>(List.of("tests-e2e/start-clickhouse.sh"));
            command.addAll(List.of(options));
            command.add(dir.toString());
            Runtime.getRuntime().addShutdownHook(new Thread(() -> stopLocal(dir)));
            Process process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (process.waitFor() != 0) {
                throw new IllegalStateException("No ClickHouse for the integration tests: tests-e2e/start-clickhouse.sh "
                        + String.join(" ", options) + " failed (its error is above). Run tests-e2e/setup.sh once, or set "
                        + variable + " to a ClickHouse, or run Docker for Testcontainers.");
            }
            for (String line : output.split("\n")) {
                if (line.startsWith("export " + variable + "=")) {
                    return line.substring(line.indexOf('=') + 1).trim();
                }
            }
            throw new IllegalStateException("start-clickhouse.sh printed no " + variable + ": " + output);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Stops what start-clickhouse.sh started in DIR and removes DIR. */
    private static void stopLocal(Path dir) {
        try {
            new ProcessBuilder("tests-e2e/stop-clickhouse.sh", dir.toString()).inheritIO().start().waitFor();
            try (Stream<Path> files = Files.walk(dir)) {
                files.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
            }
        } catch (IOException | InterruptedException e) {
            System.err.println("could not stop the local ClickHouse in " + dir + ": " + e);
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
        return fromUrl(startLocal("CLICKHOUSE_URL"));
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
            if (ServerErrors.isNoKeeperMap(e)) {
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
