package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Opens the lock the {@code lock} setting asks for, creating its table. {@code auto}: the KeeperMap lock wherever the
 * server has KeeperMap (found by creating its table: without {@code keeper_map_path_prefix} that fails with code 36),
 * else the claims lock on a single node, and a refusal on replicated tables, where claims cannot promise one holder.
 */
public final class Locks {
    private static final Logger log = LoggerFactory.getLogger(Locks.class);

    private Locks() {
    }

    /** {@code replicated}: the state table is replicated (a cluster or Cloud), where claims cannot promise one holder. */
    public static StateLock open(ClickHouse ch, LockTables tables, LockTables.Found found, boolean replicated,
                                 Settings settings) {
        String table = settings.schema() + "." + settings.table();
        switch (settings.lock()) {
            case KEEPER -> {
                if (!tables.ensureKeeperLock(ch, found)) {
                    throw new BridgeException(ErrorCode.CONFIGURATION, "state_backend.clickhouse.lock is 'keeper', but "
                            + "this ClickHouse has no KeeperMap tables (its config sets no keeper_map_path_prefix). "
                            + "Configure keeper_map_path_prefix and a Keeper (<zookeeper>) on the server, or set lock to "
                            + "auto or claims.");
                }
                return new KeeperLock(ch, tables, settings.lockTimeout());
            }
            case CLAIMS -> {
                String engine = tables.ensureClaims(ch, found);
                if (replicated || !"MergeTree".equals(engine)) {
                    log.warn("The state table {} is {} and the lock table a {}: the claims lock cannot promise "
                            + "exclusive access there (docs/lock.md). Do not run two pipelines on one state id at "
                            + "once, or use lock: keeper.", table, replicated ? "replicated" : "not replicated", engine);
                }
                return new ClaimLock(ch, tables, settings.lockTimeout());
            }
            default -> {
                if (tables.ensureKeeperLock(ch, found)) {
                    return new KeeperLock(ch, tables, settings.lockTimeout());
                }
                if (replicated) {
                    throw new BridgeException(ErrorCode.CONFIGURATION, "The state table " + table + " is replicated, "
                            + "where only a KeeperMap lock keeps two runs of one pipeline apart, "
                            + "and this ClickHouse has no KeeperMap tables (no keeper_map_path_prefix in its config). "
                            + "Configure keeper_map_path_prefix on the servers, or set state_backend.clickhouse.lock to "
                            + "'claims' knowingly: then never run a pipeline twice at once.");
                }
                return open(ch, tables, found, false, settings.withLock(Settings.LockKind.CLAIMS));
            }
        }
    }
}
