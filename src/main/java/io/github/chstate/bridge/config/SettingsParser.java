package io.github.chstate.bridge.config;

import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;

import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Turns the settings sent with {@code initialize} into {@link Settings}: the URI
 * {@code clickhouse://user:password@host:port/database} first, then each non-null setting over it. Every bad value
 * is named in one error, one line each, so that a user fixes them all in one go.
 */
public final class SettingsParser {
    public static final Set<String> KEYS = Set.of(
            "uri", "host", "port", "database", "user", "password", "secure", "ca_cert", "schema", "table",
            "connect_timeout_seconds", "query_timeout_seconds",
            "lock_timeout_seconds", "lock_retry_seconds", "lock_wait_seconds", "cluster", "lock", "retry_budget_seconds", "history_days",
            "write_interval_seconds", "exclusive_runs");

    /** The longest schema or table name taken: the server's limit is 206 for a table, and ours get suffixes. */
    static final int MAX_NAME = 180;
    private static final Pattern NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*");

    private SettingsParser() {
    }

    public static Settings parse(Map<String, ?> raw) {
        for (String key : raw.keySet()) {
            if (!KEYS.contains(key)) {
                throw bad(key, "is not a setting of this backend; known settings: " + String.join(", ", KEYS.stream().sorted().toList()));
            }
        }
        Values v = new Values(raw);
        v.applyUri(); // a bad URI ends here: the values below may come from it
        boolean secure = v.bool("secure", false);
        String database = v.required("database", "the database to connect to: the URI path (clickhouse://user@host:8123/DATABASE) or state_backend.clickhouse.database");
        String user = v.required("user", "the ClickHouse user: in the URI (clickhouse://USER@host:8123/db) or state_backend.clickhouse.user");
        Settings settings = new Settings(
                v.string("host", "localhost"),
                v.integer("port", secure ? 8443 : 8123, 1, 65535),
                database,
                user,
                v.string("password", ""),
                secure,
                v.string("ca_cert", null),
                v.name("schema", "meltano"),
                v.name("table", "state"),
                v.seconds("connect_timeout_seconds", 10),
                v.seconds("query_timeout_seconds", 30),
                v.seconds("lock_timeout_seconds", 10),
                v.seconds("lock_retry_seconds", 1),
                v.seconds("lock_wait_seconds", 30),
                v.string("cluster", null),
                v.choice("lock", Settings.LockKind.AUTO),
                v.seconds("retry_budget_seconds", 60, true),
                v.integer("history_days", 30, 0, 36_500),
                v.seconds("write_interval_seconds", 1, true),
                v.bool("exclusive_runs", true));
        v.failIfAnyWasBad();
        return settings;
    }

    static BridgeException bad(String key, String problem) {
        return new BridgeException(ErrorCode.CONFIGURATION, "Setting '" + key + "' " + problem);
    }

    /** The raw values, with the URI's parts filled in where no explicit setting is given. */
    private static final class Values {
        private final Map<String, Object> values = new java.util.HashMap<>();
        private final List<BridgeException> problems = new ArrayList<>();

        Values(Map<String, ?> raw) {
            raw.forEach((k, val) -> {
                if (val != null && !(val instanceof String s && s.isEmpty() && !k.equals("password"))) {
                    values.put(k, val);
                }
            });
        }

        void applyUri() {
            Object uriValue = values.get("uri");
            if (uriValue == null) {
                return;
            }
            URI uri;
            try {
                uri = new URI(uriValue.toString());
            } catch (URISyntaxException e) {
                throw bad("uri", "is not a valid URI (expected clickhouse://user:password@host:8123/database): "
                        + e.getReason() + ". Percent-encode special characters in the password.");
            }
            if (!"clickhouse".equalsIgnoreCase(uri.getScheme())) {
                throw bad("uri", "must start with clickhouse:// (got scheme '" + uri.getScheme() + "')");
            }
            if (uri.getRawQuery() != null || uri.getRawFragment() != null) {
                throw bad("uri", "must not have a query or fragment; give options as state_backend.clickhouse.<setting>");
            }
            String userInfo = uri.getRawUserInfo();
            if (userInfo != null) {
                int colon = userInfo.indexOf(':');
                fill("user", decode(colon < 0 ? userInfo : userInfo.substring(0, colon)));
                if (colon >= 0) {
                    fill("password", decode(userInfo.substring(colon + 1)));
                }
            }
            if (uri.getHost() != null) {
                fill("host", uri.getHost().replaceAll("^\\[|]$", ""));
            } else if (uri.getRawAuthority() != null) {
                // java.net.URI reads host:port only when both are valid; say which part is not
                String hostPort = uri.getRawAuthority().substring(uri.getRawAuthority().lastIndexOf('@') + 1);
                String port = hostPort.substring(hostPort.lastIndexOf(':') + 1);
                if (hostPort.contains(":") && !hostPort.endsWith("]") && !port.matches("\\d*")) {
                    throw bad("uri", "has a port that is not a number: '" + port
                            + "' (expected clickhouse://user:password@host:8123/database)");
                }
                throw bad("uri", "has no valid host (expected clickhouse://user:password@host:8123/database)");
            }
            if (uri.getPort() >= 0) {
                fill("port", uri.getPort());
            }
            String path = uri.getRawPath();
            if (path != null && path.length() > 1) {
                fill("database", decode(path.substring(1)));
            }
        }

        private void fill(String key, Object value) {
            values.putIfAbsent(key, value);
        }

        private static String decode(String s) {
            return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
        }

        String string(String key, String fallback) {
            Object val = values.get(key);
            return val == null ? fallback : val.toString();
        }

        /** Notes a bad value and gives the default in its place, so that the other values are checked too. */
        private <T> T problem(BridgeException bad, T fallback) {
            problems.add(bad);
            return fallback;
        }

        /** One error naming every bad value; its code is the first one's. */
        void failIfAnyWasBad() {
            if (!problems.isEmpty()) {
                throw new BridgeException(problems.get(0).code(),
                        String.join("\n", problems.stream().map(Throwable::getMessage).toList()));
            }
        }

        String required(String key, String what) {
            String val = string(key, null);
            if (val == null || val.isBlank()) {
                return problem(new BridgeException(ErrorCode.MISSING_SETTING, "Missing setting '" + key + "': " + what + "."), "");
            }
            return val;
        }

        String name(String key, String fallback) {
            String val = string(key, fallback);
            if (!NAME.matcher(val).matches()) {
                return problem(bad(key, "must be a plain ClickHouse identifier (letters, digits, underscore; not starting with a digit), got '" + val + "'"), fallback);
            }
            if (val.length() > MAX_NAME) {
                return problem(bad(key, "must be at most " + MAX_NAME + " characters (ClickHouse keeps each table in files "
                        + "named after it, and file names have a limit), got " + val.length()), fallback);
            }
            return val;
        }

        <E extends Enum<E>> E choice(String key, E fallback) {
            Object val = values.get(key);
            if (val == null) {
                return fallback;
            }
            for (E option : fallback.getDeclaringClass().getEnumConstants()) {
                if (option.name().equalsIgnoreCase(val.toString().trim())) {
                    return option;
                }
            }
            return problem(bad(key, "must be one of " + java.util.Arrays.stream(fallback.getDeclaringClass().getEnumConstants())
                    .map(o -> o.name().toLowerCase(Locale.ROOT)).toList() + ", got '" + val + "'"), fallback);
        }

        boolean bool(String key, boolean fallback) {
            Object val = values.get(key);
            if (val == null) {
                return fallback;
            }
            if (val instanceof Boolean b) {
                return b;
            }
            return switch (val.toString().trim().toLowerCase(Locale.ROOT)) {
                case "true", "1", "yes", "on" -> true;
                case "false", "0", "no", "off" -> false;
                default -> problem(bad(key, "must be true or false, got '" + val + "'"), fallback);
            };
        }

        int integer(String key, int fallback, int min, int max) {
            Object val = values.get(key);
            if (val == null) {
                return fallback;
            }
            long n;
            try {
                n = val instanceof Number num && num.doubleValue() == num.longValue() ? num.longValue() : Long.parseLong(val.toString().trim());
            } catch (NumberFormatException e) {
                return problem(bad(key, "must be a whole number, got '" + val + "'"), fallback);
            }
            if (n < min || n > max) {
                return problem(bad(key, "must be between " + min + " and " + max + ", got " + n), fallback);
            }
            return (int) n;
        }

        Duration seconds(String key, double fallback) {
            return seconds(key, fallback, false);
        }

        Duration seconds(String key, double fallback, boolean zeroAllowed) {
            Duration byDefault = Duration.ofMillis(Math.round(fallback * 1000));
            Object val = values.get(key);
            double s;
            try {
                s = val == null ? fallback : val instanceof Number num ? num.doubleValue() : Double.parseDouble(val.toString().trim());
            } catch (NumberFormatException e) {
                return problem(bad(key, "must be a number of seconds, got '" + val + "'"), byDefault);
            }
            if (!(s > 0 || zeroAllowed && s == 0) || s > 86_400) {
                return problem(bad(key, "must be " + (zeroAllowed ? "0 or more" : "more than 0")
                        + " and at most 86400 seconds, got " + val), byDefault);
            }
            return Duration.ofMillis(Math.round(s * 1000));
        }
    }
}
