package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Which lock the {@code lock} setting gets ({@link #choose}, for {@code initialize} and {@code check} alike), and
 * opening it. {@code auto}: the KeeperMap lock wherever the server has KeeperMap, else the claims lock on a single
 * node, and a refusal on replicated tables, where claims cannot promise one holder. Once a single node's schema has
 * the claims table and not the KeeperMap one, {@code auto} keeps to claims ({@link #asksKeeperMap}).
 */
public final class Locks {
    private static final Logger log = LoggerFactory.getLogger(Locks.class);

    private Locks() {
    }

    /** What the setting, KeeperMap on the server and the deployment decide; a refusal says why and what to do. */
    public enum Choice {
        KEEPER("", ""),
        CLAIMS("", ""),
        /** Claims where they cannot promise one holder: asked for by name, so taken with a warning. */
        CLAIMS_NOT_EXCLUSIVE("", ""),
        NO_KEEPER_MAP("state_backend.clickhouse.lock is 'keeper', but this ClickHouse has no KeeperMap tables (its "
                + "config sets no keeper_map_path_prefix).", "Configure keeper_map_path_prefix and a Keeper "
                + "(<zookeeper>) on the server, or set lock to auto or claims."),
        REPLICATED_WITHOUT_KEEPER_MAP("The state table %s is replicated, where only a KeeperMap lock keeps two runs of "
                + "one pipeline apart, and this ClickHouse has no KeeperMap tables (no keeper_map_path_prefix in its "
                + "config).", "Configure keeper_map_path_prefix on the servers, or set state_backend.clickhouse.lock "
                + "to 'claims' knowingly: then never run a pipeline twice at once.");

        private final String problem;
        public final String fix;

        Choice(String problem, String fix) {
            this.problem = problem;
            this.fix = fix;
        }

        /** Why the bridge refuses the state table {@code schema.table}; empty when it does not. */
        public String problem(String table) {
            return String.format(problem, table);
        }
    }

    public static Choice choose(Settings.LockKind asked, boolean keeperMap, boolean replicated) {
        return switch (asked) {
            case KEEPER -> keeperMap ? Choice.KEEPER : Choice.NO_KEEPER_MAP;
            case CLAIMS -> replicated ? Choice.CLAIMS_NOT_EXCLUSIVE : Choice.CLAIMS;
            case AUTO -> keeperMap ? Choice.KEEPER : replicated ? Choice.REPLICATED_WITHOUT_KEEPER_MAP : Choice.CLAIMS;
        };
    }

    /**
     * Whether the choice depends on the server having KeeperMap. Not for claims; nor for {@code auto} on a single
     * node whose claims table exists without the KeeperMap lock's: every bridge of that schema takes the lock whose
     * table is there, even after KeeperMap is added to the server, and none sends a probe on each start.
     */
    public static boolean asksKeeperMap(Settings.LockKind asked, LockTables.Found found, boolean replicated) {
        return switch (asked) {
            case CLAIMS -> false;
            case KEEPER -> true;
            case AUTO -> replicated || found.keeperLockExists() || found.claimsEngine().isEmpty();
        };
    }

    /**
     * Opens the chosen lock, creating its table; whether the server has KeeperMap is found by creating the KeeperMap
     * table, where that matters ({@link #asksKeeperMap}). {@code replicated}: the state table is replicated (a
     * cluster or Cloud).
     */
    public static StateLock open(ClickHouse ch, LockTables tables, LockTables.Found found, boolean replicated,
                                 Settings settings) {
        boolean keeperMap = asksKeeperMap(settings.lock(), found, replicated) && tables.ensureKeeperLock(ch, found);
        Choice choice = choose(settings.lock(), keeperMap, replicated);
        switch (choice) {
            case KEEPER:
                return new KeeperLock(ch, tables, new LeasePolicy(settings.lockTimeout(), settings.lockWait()));
            case CLAIMS:
            case CLAIMS_NOT_EXCLUSIVE:
                String engine = tables.ensureClaims(ch, found);
                if (choice == Choice.CLAIMS_NOT_EXCLUSIVE || !"MergeTree".equals(engine)) {
                    log.warn("The state table {}.{} is {} and the lock table a {}: the claims lock cannot promise "
                            + "exclusive access there (docs/lock.md). Do not run two pipelines on one state id at "
                            + "once, or use lock: keeper.", settings.schema(), settings.table(),
                            replicated ? "replicated" : "not replicated", engine);
                }
                return new ClaimLock(ch, tables, new LeasePolicy(settings.lockTimeout(), settings.lockWait()));
            default:
                throw new BridgeException(ErrorCode.CONFIGURATION,
                        choice.problem(settings.schema() + "." + settings.table()) + " " + choice.fix);
        }
    }
}
