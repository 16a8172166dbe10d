package io.github.chstate.bridge.it;

import org.testcontainers.DockerClientFactory;
import org.testcontainers.clickhouse.ClickHouseContainer;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;

/**
 * The ClickHouse the integration tests run against: {@code CLICKHOUSE_URL} (http[s]://user:password@host:port) if set,
 * else a Testcontainers ClickHouse where Docker runs. With neither, tests fail and say so: they are never skipped.
 */
public final class ClickHouseEndpoint {
    private static Map<String, Object> base;

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
