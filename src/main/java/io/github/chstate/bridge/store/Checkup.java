package io.github.chstate.bridge.store;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clickhouse.ServerErrors;
import io.github.chstate.bridge.clickhouse.Sql;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.lock.LockTables;
import io.github.chstate.bridge.lock.Locks;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.UUID;

/**
 * The {@code check} call: what the backend would find and do with these settings, line by line, each OK, WARN or
 * FAIL with the fix. It writes no state and creates nothing that stays: what it must try (the grants, KeeperMap) it
 * tries on tables of a scratch name, in a scratch database where the schema does not exist yet, and drops them.
 */
public final class Checkup {
    /** One finding; {@code fix} is empty when there is nothing to do. */
    public record Line(String check, String status, String detail, String fix) {
        static Line ok(String check, String detail) {
            return new Line(check, "OK", detail, "");
        }

        /** No connection, or a statement failed on the way: its message names what to correct. */
        public static Line failed(BridgeException e) {
            return new Line("connection", "FAIL", e.getMessage(), "Correct the setting the message names.");
        }
    }

    private final Settings settings;
    private final ClickHouse ch;
    private final Tables tables;
    private final List<Line> lines = new ArrayList<>();

    private Checkup(Settings settings, ClickHouse ch) {
        this.settings = settings;
        this.ch = ch;
        this.tables = new Tables(settings);
    }

    public static List<Line> run(Settings settings, ClickHouse ch) {
        Checkup checkup = new Checkup(settings, ch);
        checkup.all();
        return checkup.lines;
    }

    private record Server(String version, String user, long clockDifferenceMillis, boolean cloud) {
    }

    private void all() {
        Server server;
        try {
            long before = ch.clock().wallMillis();
            server = ch.queryOne("SELECT version(), currentUser(), toUnixTimestamp64Milli(now64(3)), (SELECT count() "
                    + "FROM system.settings WHERE name = 'cloud_mode' AND value = '1')", rs -> new Server(
                    rs.getString(1), rs.getString(2),
                    rs.getLong(3) - (before + ch.clock().wallMillis()) / 2, rs.getLong(4) > 0));
        } catch (BridgeException e) {
            lines.add(Line.failed(e));
            return;
        }
        lines.add(Line.ok("connection", "ClickHouse " + server.version + " at " + endpoint() + " as user "
                + server.user));
        clock(server.clockDifferenceMillis);
        String stateEngine = engineOf(settings.table());
        Deployment deployment = deployment(stateEngine, server.cloud);
        tablesLine(stateEngine);
        Boolean keeperMap = probe();
        lock(deployment, keeperMap);
    }

    private String endpoint() {
        return (settings.secure() ? "https" : "http") + "://" + settings.host() + ":" + settings.port();
    }

    private void clock(long differenceMillis) {
        String detail = String.format(Locale.ROOT, "this machine's clock is %.3f s %s the server's",
                Math.abs(differenceMillis) / 1000.0, differenceMillis > 0 ? "behind" : "ahead of");
        if (Math.abs(differenceMillis) < 5_000) {
            lines.add(Line.ok("clock", detail));
        } else {
            lines.add(new Line("clock", "WARN", detail + ". State versions and history times are the server's; "
                    + "Meltano's logs are this machine's, so they will not line up.", "Synchronize the clocks (NTP)."));
        }
    }

    private Deployment deployment(String stateEngine, boolean cloud) {
        Deployment.Decided decided = Deployment.decide(stateEngine, settings.cluster(), cloud);
        Deployment deployment = decided.deployment();
        String name = switch (deployment) {
            case SINGLE_NODE -> "single server";
            case REPLICATED -> "cluster" + (settings.cluster() == null ? "" : " '" + settings.cluster() + "'");
            case SHARED -> "ClickHouse Cloud";
        };
        if (settings.cluster() != null && ch.query("SELECT 1 FROM system.clusters WHERE cluster = "
                + Sql.literal(settings.cluster()) + " LIMIT 1", rs -> 1).isEmpty()) {
            lines.add(new Line("deployment", "FAIL", "the server has no cluster '" + settings.cluster() + "'",
                    "Set state_backend.clickhouse.cluster to a cluster in SELECT cluster FROM system.clusters, or "
                            + "unset it for a single server."));
            return deployment;
        }
        lines.add(Line.ok("deployment", name + ": " + decided.why()));
        return deployment;
    }

    private void tablesLine(String stateEngine) {
        String state = settings.schema() + "." + settings.table();
        if (stateEngine.isEmpty()) {
            lines.add(Line.ok("tables", state + " does not exist yet: the first command creates it"));
            return;
        }
        long ids = ch.queryOne("SELECT uniqExact(state_id) FROM " + tables.state, rs -> rs.getLong(1));
        String history = engineOf(settings.table() + "_history").isEmpty() ? "no history table"
                : "history " + state + "_history: " + ch.queryOne("SELECT count() FROM " + tables.history,
                rs -> rs.getLong(1)) + " versions";
        lines.add(Line.ok("tables", state + " (" + stateEngine + "): " + ids + " state ids; " + history));
    }

    private String engineOf(String table) {
        List<String> found = ch.query("SELECT engine FROM system.tables WHERE database = " + Sql.literal(settings.schema())
                + " AND name = " + Sql.literal(table), rs -> rs.getString(1));
        return found.isEmpty() ? "" : found.get(0);
    }

    /**
     * Tries what the backend does, on scratch tables: create (and the database, where the schema is missing),
     * insert, select, alter, KeeperMap. Answers whether KeeperMap tables work, or null when that could not be tried.
     */
    private Boolean probe() {
        String scratch = "_meltano_check_" + UUID.randomUUID().toString().replace("-", "");
        boolean schemaExists = !ch.query("SELECT 1 FROM system.databases WHERE name = " + Sql.literal(settings.schema()),
                rs -> 1).isEmpty();
        String database = schemaExists ? settings.schema() : scratch;
        String table = Sql.identifier(database) + "." + Sql.identifier(scratch);
        String keeperTable = Sql.identifier(database) + "." + Sql.identifier(scratch + "_keeper");
        String grant = "GRANT CREATE TABLE, DROP TABLE, INSERT, SELECT, ALTER ON " + Sql.identifier(settings.schema())
                + ".* TO " + Sql.identifier(settings.user());
        try {
            if (!schemaExists && !tried("create database", "CREATE DATABASE " + Sql.identifier(database),
                    "GRANT CREATE DATABASE ON " + Sql.identifier(settings.schema()) + ".* TO "
                            + Sql.identifier(settings.user()) + ", or create the database " + settings.schema()
                            + " for this user.")) {
                return null;
            }
            if (!tried("create table", "CREATE TABLE " + table + " (k String, at DateTime DEFAULT now()) "
                    + "ENGINE = MergeTree ORDER BY k", grant)) {
                return null;
            }
            boolean all = tried("insert", "INSERT INTO " + table + " (k) VALUES ('check')", grant)
                    & tried("select", "SELECT count() FROM " + table, grant)
                    & tried("alter", "ALTER TABLE " + table + " MODIFY TTL at + INTERVAL 1 DAY", grant);
            return keeperMap(keeperTable, all);
        } finally {
            dropQuietly("DROP TABLE IF EXISTS " + keeperTable + " SYNC");
            dropQuietly("DROP TABLE IF EXISTS " + table + " SYNC");
            if (!schemaExists) {
                dropQuietly("DROP DATABASE IF EXISTS " + Sql.identifier(database) + " SYNC");
            }
        }
    }

    private Boolean keeperMap(String keeperTable, boolean grantsOk) {
        try {
            ch.execute("CREATE TABLE " + keeperTable + " (k String, v String) ENGINE = KeeperMap("
                    + Sql.literal("/meltano_state_check/" + UUID.randomUUID()) + ") PRIMARY KEY k");
            lines.add(Line.ok("keepermap", "KeeperMap tables work on this server"));
            return true;
        } catch (BridgeException e) {
            if (ServerErrors.isNoKeeperMap(e)) {
                lines.add(Line.ok("keepermap", "this server has no KeeperMap tables (no keeper_map_path_prefix)"));
                return false;
            }
            if (grantsOk) {
                lines.add(new Line("keepermap", "WARN", "a KeeperMap table could not be created: " + e.getMessage(),
                        "Grant CREATE TABLE on KeeperMap tables (and the KEEPER_MAP table engine) to the user, or set "
                                + "lock: claims on a single server."));
            }
            return null;
        }
    }

    private void lock(Deployment deployment, Boolean keeperMap) {
        String setting = "lock: " + settings.lock().name().toLowerCase(Locale.ROOT);
        if (keeperMap == null) {
            lines.add(new Line("lock", "WARN", setting + "; which lock it takes is not known: the KeeperMap probe did "
                    + "not run", "Fix the lines above first."));
            return;
        }
        LockTables.Found found = new LockTables.Found(engineOf(tables.locks().claimsName),
                !engineOf(tables.locks().keeperLockName).isEmpty());
        boolean asked = Locks.asksKeeperMap(settings.lock(), found, deployment.replicated());
        Locks.Choice choice = Locks.choose(settings.lock(), keeperMap && asked, deployment.replicated());
        lines.add(switch (choice) {
            case KEEPER -> Line.ok("lock", "keeper (" + setting + ", and the server has KeeperMap tables)");
            case CLAIMS -> Line.ok("lock", "claims (" + setting + (!asked && keeperMap
                    ? ", and the schema's claims table exists: auto keeps to it" : keeperMap ? ""
                    : ", and no KeeperMap on the server") + "; exclusive on a single server)");
            case CLAIMS_NOT_EXCLUSIVE -> new Line("lock", "WARN", "claims (" + setting + ") on a "
                    + deployment.name().toLowerCase(Locale.ROOT) + " deployment, where it cannot promise one holder",
                    "Use lock: keeper (KeeperMap) there.");
            default -> new Line("lock", "FAIL", setting + ": " + choice.problem(settings.schema() + "."
                    + settings.table()), choice.fix);
        });
    }

    /** Runs one probe statement; a failure becomes a FAIL line with the fix. */
    private boolean tried(String what, String sql, String fix) {
        try {
            ch.execute(sql);
            lines.add(Line.ok("grant " + what, "the user may " + what.toUpperCase(Locale.ROOT) + " in "
                    + settings.schema()));
            return true;
        } catch (BridgeException e) {
            lines.add(new Line("grant " + what, "FAIL", e.getMessage(), fix));
            return false;
        }
    }

    private void dropQuietly(String sql) {
        try {
            ch.execute(sql);
        } catch (BridgeException e) {
            lines.add(new Line("cleanup", "WARN", "could not drop a scratch object: " + e.getMessage(),
                    "Run " + sql + " as a user who may."));
        }
    }
}
