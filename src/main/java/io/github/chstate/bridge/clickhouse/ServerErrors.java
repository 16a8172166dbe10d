package io.github.chstate.bridge.clickhouse;

import com.clickhouse.client.api.ServerException;

import java.sql.SQLException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** What a failure of a statement says about the server's answer: its error code, a lost Keeper compare-and-set. */
public final class ServerErrors {
    private static final Pattern SERVER_CODE = Pattern.compile("Code: (\\d+)\\.");

    private ServerErrors() {
    }

    /** The ClickHouse error code anywhere in a failure: the driver's exceptions, else "Code: N." in a message. */
    public static Integer code(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof SQLException sql && sql.getErrorCode() > 0) {
                return sql.getErrorCode();
            }
            if (t instanceof ServerException server && server.getCode() > 0) {
                return server.getCode();
            }
            Matcher m = SERVER_CODE.matcher(String.valueOf(t.getMessage()));
            if (m.find()) {
                return Integer.parseInt(m.group(1));
            }
        }
        return null;
    }

    /**
     * Whether a statement failed because the server has no KeeperMap tables: ClickHouse answers the CREATE of one with
     * code 36 (BAD_ARGUMENTS) and names the missing {@code keeper_map_path_prefix}; 36 alone is any bad argument.
     */
    public static boolean isNoKeeperMap(Throwable e) {
        if (!Integer.valueOf(36).equals(code(e))) {
            return false;
        }
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (String.valueOf(t.getMessage()).contains("keeper_map_path_prefix")) {
                return true;
            }
        }
        return false;
    }

    /** Whether the user may not run the statement: code 497 (ACCESS_DENIED). */
    public static boolean isAccessDenied(Throwable e) {
        return Integer.valueOf(497).equals(code(e));
    }

    /**
     * Whether a statement lost a Keeper compare-and-set under {@code keeper_map_strict_mode}: code 999 with "Node
     * exists" (a create of an existing row) or "Bad version" (the row changed between the server's read and write).
     */
    public static boolean isKeeperConflict(Throwable e) {
        if (!Integer.valueOf(999).equals(code(e))) {
            return false;
        }
        for (Throwable t = e; t != null; t = t.getCause()) {
            String message = String.valueOf(t.getMessage());
            if (message.contains("Node exists") || message.contains("Bad version")) {
                return true;
            }
        }
        return false;
    }
}
