package io.github.chstate.bridge.clickhouse;

import com.clickhouse.client.api.Client;
import com.clickhouse.client.api.insert.InsertResponse;
import com.clickhouse.client.api.insert.InsertSettings;
import com.clickhouse.client.api.query.QueryResponse;
import com.clickhouse.client.api.query.QuerySettings;
import com.clickhouse.data.ClickHouseFormat;
import com.clickhouse.jdbc.ConnectionImpl;
import com.clickhouse.jdbc.Driver;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.pool.HikariPool;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PushbackInputStream;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.function.Supplier;

/** The connection pool, and the one place where SQL is run and driver errors become {@link BridgeException}s. */
public final class ClickHouse implements AutoCloseable {
    /** Reads one row of a result. */
    @FunctionalInterface
    public interface Row<T> {
        T read(ResultSet rs) throws SQLException;
    }

    /** Reads one row of a RowBinary answer from {@code in}. */
    @FunctionalInterface
    public interface BinaryRow<T> {
        T read(InputStream in) throws IOException;
    }

    /** Writes the rows of an INSERT, in RowBinary; may be called again when the driver re-sends the insert. */
    @FunctionalInterface
    public interface Rows {
        void write(OutputStream out) throws IOException;
    }

    private static final Logger log = LoggerFactory.getLogger(ClickHouse.class);
    private static final java.util.Set<Integer> AUTH_CODES = java.util.Set.of(192, 193, 194, 516);

    /**
     * LZ4 in Java, not lz4-java's native library: that one is copied into the temp directory at every start and left
     * there for good (with its .lck) by a bridge that is killed; the Java one needs no file and loads no native code.
     */
    private static final String PURE_JAVA_LZ4 = "disable_native_compression";

    private final HikariDataSource pool;
    private final Settings settings;
    private final Retry retry;
    private final Clock clock;

    public ClickHouse(Settings settings) {
        this(settings, Clock.SYSTEM);
    }

    /** {@code clock}: the bridge's one clock, which everything that uses this connection measures, waits and schedules with. */
    public ClickHouse(Settings settings, Clock clock) {
        this.settings = settings;
        this.clock = clock;
        this.retry = new Retry(settings.retryBudget(), endpoint(), clock);
        Properties driver = new Properties();
        driver.setProperty("user", settings.user());
        driver.setProperty("password", settings.password());
        driver.setProperty("connection_timeout", String.valueOf(settings.connectTimeout().toMillis()));
        driver.setProperty("socket_timeout", String.valueOf(settings.queryTimeout().toMillis()));
        // Retry is ours alone, one policy for every statement: the driver would re-send some failures itself.
        driver.setProperty("retry", "0");
        // Reads must see every completed write: never let the server buffer our inserts.
        driver.setProperty("clickhouse_setting_async_insert", "0");
        driver.setProperty(PURE_JAVA_LZ4, "true");
        if (settings.caCert() != null) {
            driver.setProperty("sslrootcert", settings.caCert());
        }
        HikariConfig config = new HikariConfig();
        config.setPoolName("clickhouse-state");
        config.setDataSource(new HttpConnections(settings.jdbcUrl(), driver));
        config.setMaximumPoolSize(4);
        config.setMinimumIdle(1);
        config.setConnectionTimeout(settings.connectTimeout().toMillis());
        config.setInitializationFailTimeout(settings.connectTimeout().toMillis());
        try {
            pool = new HikariDataSource(config);
        } catch (HikariPool.PoolInitializationException e) {
            throw translate(e.getCause() != null ? e.getCause() : e);
        }
    }

    /**
     * Does, without connecting, the one-time work of the first connection (the driver's JDBC connection and statement,
     * its HTTP client, LZ4, the random source of UUIDs, locale data): run on another thread at start, it takes 30–50 ms
     * off the first connection (103–162 → 73–92 ms, measured without the class archive). A driver connection sends
     * nothing before its first statement (it takes the server's time zone to be UTC until a query says otherwise).
     */
    public static void warmUp() {
        Properties user = new Properties();
        user.setProperty("user", "warm-up");
        user.setProperty("password", "");
        user.setProperty(PURE_JAVA_LZ4, "true");
        try (Connection c = new Driver().connect("jdbc:clickhouse:http://localhost:8123/default", user);
             Statement st = c.createStatement()) {
            st.setEscapeProcessing(false);
            UUID.randomUUID();
        } catch (SQLException | RuntimeException e) {
            log.debug("Driver warm-up failed ({}); the first connection does the work instead.", e.toString());
        }
    }

    /** Runs a statement that returns no rows. */
    public void execute(String sql) {
        execute(() -> sql);
    }

    /** Runs a statement that returns no rows, asking {@code sql} for it before every try; what it throws ends it. */
    public void execute(Supplier<String> sql) {
        call(() -> {
            String statement = sql.get();
            try (Connection c = pool.getConnection(); Statement st = c.createStatement()) {
                st.setEscapeProcessing(false); // our SQL has no JDBC escapes, and literals may hold braces
                st.execute(statement);
                return null;
            }
        });
    }

    public <T> List<T> query(String sql, Row<T> row) {
        return call(() -> {
            try (Connection c = pool.getConnection(); Statement st = c.createStatement()) {
                st.setEscapeProcessing(false);
                try (ResultSet rs = st.executeQuery(sql)) {
                    List<T> out = new ArrayList<>();
                    while (rs.next()) {
                        out.add(row.read(rs));
                    }
                    return out;
                }
            }
        });
    }

    public <T> T queryOne(String sql, Row<T> row) {
        List<T> rows = query(sql, row);
        return rows.isEmpty() ? null : rows.get(0);
    }

    /**
     * Inserts rows sent as data in the request body, never as SQL: {@code INSERT INTO <target> FORMAT RowBinary},
     * through the client under the pool's JDBC connection. {@code target} is {@code table (columns)}, or
     * {@code table (columns) SELECT * FROM input('structure') WHERE condition} to have the server insert the rows only
     * while the condition holds; it is asked for before every try, and what it throws ends the insert.
     * {@code settings} are the statement's settings. Answers how many rows the server wrote.
     */
    public long insert(Supplier<String> target, Map<String, String> settings, Rows rows) {
        InsertSettings insert = new InsertSettings();
        settings.forEach(insert::serverSetting);
        return call(() -> {
            String into = target.get();
            try (Connection c = pool.getConnection()) {
                Client client = c.unwrap(ConnectionImpl.class).getClient();
                // With no column list the client sends "INSERT INTO " + into + " FORMAT RowBinary" as it is.
                try (InsertResponse response = client.insert(into, List.of(), rows::write, ClickHouseFormat.RowBinary,
                        insert).get()) {
                    return response.getWrittenRows();
                }
            }
        });
    }

    /** Runs a query whose rows come back as RowBinary data, read by {@code row}; see {@link #insert}. */
    public <T> List<T> queryRowBinary(String sql, BinaryRow<T> row) {
        QuerySettings query = new QuerySettings().setFormat(ClickHouseFormat.RowBinary);
        return call(() -> {
            try (Connection c = pool.getConnection();
                 QueryResponse response = c.unwrap(ConnectionImpl.class).getClient().query(sql, query).get();
                 PushbackInputStream in = new PushbackInputStream(response.getInputStream())) {
                List<T> rows = new ArrayList<>();
                for (int next = in.read(); next >= 0; next = in.read()) {
                    in.unread(next);
                    rows.add(row.read(in));
                }
                return rows;
            }
        });
    }

    /**
     * Runs {@code work} so that none of its statements is tried again once {@code wait} has passed, which
     * {@code setting} decides (a lock's wait): then the last failure goes to the caller. A statement under way then
     * still ends by its own timeout (query_timeout_seconds).
     */
    public <T> T within(Duration wait, String setting, Supplier<T> work) {
        return Retry.until(clock.nanos() + wait.toNanos(), setting, work);
    }

    /** The bridge's clock: every age, deadline and pause of the bridge is measured with it. */
    public Clock clock() {
        return clock;
    }

    /** Runs {@code work} so that all its statements together are tried again within one retry budget from now. */
    public <T> T withinOneBudget(Supplier<T> work) {
        return within(settings.retryBudget(), "retry_budget_seconds", work);
    }

    /** Every statement goes through here: tried again per {@link Retry}, its failure translated. */
    private <T> T call(Retry.Attempt<T> attempt) {
        return retry.run(() -> {
            try {
                return attempt.run();
            } catch (ExecutionException e) { // the driver's futures wrap what went wrong
                throw e.getCause() instanceof Exception cause ? cause : e;
            }
        }, this::translate);
    }

    @Override
    public void close() {
        pool.close();
    }

    /** What went wrong, in words a user can act on; the SQL itself is not repeated (it may hold state). */
    private BridgeException translate(Throwable e) {
        if (e instanceof BridgeException be) {
            return be;
        }
        if (e instanceof InterruptedException) {
            Thread.currentThread().interrupt();
        }
        String endpoint = endpoint();
        Integer code = ServerErrors.code(e);
        if (code != null && AUTH_CODES.contains(code)) {
            return new BridgeException(ErrorCode.AUTHENTICATION, "ClickHouse at " + endpoint + " rejected user '"
                    + settings.user() + "': wrong user or password (ClickHouse code " + code + "). Check the URI or "
                    + "state_backend.clickhouse.user / password.", e);
        }
        if (code != null) {
            return new BridgeException(ErrorCode.CLICKHOUSE, "ClickHouse at " + endpoint + " failed: "
                    + serverMessage(e), e);
        }
        ServerErrors.HttpRefusal refusal = ServerErrors.httpRefusal(e);
        if (refusal != null) {
            return new BridgeException(ErrorCode.CLICKHOUSE, "ClickHouse at " + endpoint + " answered HTTP "
                    + refusal.status() + ": " + refusal.meaning() + "." + (refusal.passing() ? ""
                    : " Not tried again: the same request would be refused again."), e);
        }
        if (isUnreachable(e)) {
            return new BridgeException(ErrorCode.UNREACHABLE, "Cannot reach ClickHouse at " + endpoint + " ("
                    + rootMessage(e) + "). Is the server running and are host, port and secure right?", e);
        }
        return new BridgeException(ErrorCode.INTERNAL, "Unexpected failure talking to ClickHouse at " + endpoint
                + ": " + rootMessage(e), e);
    }

    private String endpoint() {
        return (settings.secure() ? "https" : "http") + "://" + settings.host() + ":" + settings.port();
    }

    private static String serverMessage(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String msg = String.valueOf(t.getMessage());
            int at = msg.indexOf("Code: ");
            if (at >= 0) {
                return msg.substring(at).replaceAll("\\s*\\(version [^)]*\\)", "").strip();
            }
        }
        return rootMessage(e);
    }

    private static boolean isUnreachable(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ConnectException || t instanceof UnknownHostException || t instanceof NoRouteToHostException
                    || t instanceof SocketTimeoutException || t instanceof javax.net.ssl.SSLException
                    || t instanceof java.sql.SQLTransientConnectionException) {
                return true;
            }
            String name = t.getClass().getSimpleName();
            if (name.contains("ConnectionInitiation") || name.contains("ConnectTimeout") || name.contains("NoHttpResponse")) {
                return true;
            }
        }
        return false;
    }

    private static String rootMessage(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String msg = root.getMessage();
        return msg == null || msg.isBlank() ? "no detail" : msg;
    }
}
