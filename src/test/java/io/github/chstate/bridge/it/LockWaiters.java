package io.github.chstate.bridge.it;

import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.config.SettingsParser;
import io.github.chstate.bridge.lock.LockTables;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Map;

/**
 * What a test waits for instead of sleeping: the trace a waiting acquire leaves in the lock table (a claim of its own,
 * or the keeper row marked wanted), polled until a deadline.
 */
final class LockWaiters {
    private LockWaiters() {
    }

    /** Polls until another process waits for {@code stateId}'s lock; fails after a minute without one. */
    static void awaitWaiter(Map<String, Object> settings, String lock, String stateId) throws Exception {
        Settings parsed = SettingsParser.parse(settings);
        LockTables tables = new LockTables(parsed);
        String schema = "`" + parsed.schema() + "`.";
        String id = "'" + stateId.replace("\\", "\\\\").replace("'", "\\'") + "'";
        String sql = lock.equals("keeper")
                ? "SELECT count() FROM " + schema + "`" + tables.keeperLockName + "` WHERE state_id = " + id
                        + " AND wanted >= at"
                : "SELECT uniqExact(token) - 1 FROM " + schema + "`" + tables.claimsName + "` WHERE state_id = " + id
                        + " AND kind = 'claim' AND token NOT IN (SELECT token FROM " + schema + "`" + tables.claimsName
                        + "` WHERE state_id = " + id + " AND kind = 'release')";
        long deadline = System.nanoTime() + 60_000_000_000L;
        try (Connection c = ClickHouseEndpoint.jdbc(settings); Statement s = c.createStatement()) {
            while (true) {
                try (ResultSet rs = s.executeQuery(sql)) {
                    if (rs.next() && rs.getLong(1) > 0) {
                        return;
                    }
                }
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("nobody waited for the lock on '" + stateId + "' within a minute");
                }
                Thread.sleep(20);
            }
        }
    }

    /** Returns once {@code nanos} (System.nanoTime) has passed: for rules that apply after a time, not for progress. */
    static void until(long nanos) throws InterruptedException {
        for (long left = nanos - System.nanoTime(); left > 0; left = nanos - System.nanoTime()) {
            Thread.sleep(Math.max(1, left / 1_000_000));
        }
    }
}
