package io.github.chstate.bridge.clickhouse;

import com.clickhouse.client.api.ClientException;
import com.clickhouse.client.api.ServerException;

import java.sql.SQLException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** What a failure of a statement says about the server's answer: its error code, a lost Keeper compare-and-set. */
public final class ServerErrors {
    private static final Pattern SERVER_CODE = Pattern.compile("Code: (\\d+)\\.");
    /** How the driver words an HTTP status it has no exception of its own for (and 502). */
    private static final Pattern DRIVER_STATUS = Pattern.compile("^(?:Unexpected result status |Server returned ')(\\d{3})");

    /**
     * An HTTP answer without a ClickHouse error: what its status means, and whether the same request may pass later
     * (a busy or restarting proxy or server) or is refused again (its size, its address).
     */
    public record HttpRefusal(int status, String meaning, boolean passing) {
    }

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

    /** The HTTP status of an answer that carried no ClickHouse error (a proxy's, or a server's refusal); else null. */
    public static HttpRefusal httpRefusal(Throwable e) {
        if (code(e) != null) {
            return null;
        }
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ServerException server && server.getTransportProtocolCode() >= 400) {
                return httpRefusal(server.getTransportProtocolCode());
            }
            if (t instanceof ClientException) {
                Matcher m = DRIVER_STATUS.matcher(String.valueOf(t.getMessage()));
                if (m.find()) {
                    return httpRefusal(Integer.parseInt(m.group(1)));
                }
            }
        }
        return null;
    }

    static HttpRefusal httpRefusal(int status) {
        return switch (status) {
            case 400 -> new HttpRefusal(status, "the server or a proxy refused the request as malformed without a "
                    + "ClickHouse error (ClickHouse answers so a URL longer than http_max_uri_size)", false);
            case 413 -> new HttpRefusal(status, "the request was larger than the server or a proxy in front of it "
                    + "accepts (a proxy's body limit, e.g. nginx client_max_body_size)", false);
            case 414 -> new HttpRefusal(status, "the request's URL was longer than a proxy in front of "
                    + "ClickHouse accepts", false);
            case 431 -> new HttpRefusal(status, "the request's headers were larger than the server or a proxy accepts",
                    false);
            case 408, 429 -> new HttpRefusal(status, "a proxy or the server turned the request away for now (too "
                    + "slow, or too many requests)", true);
            case 502, 503, 504 -> new HttpRefusal(status, "a proxy or load balancer in front of ClickHouse could not "
                    + "get an answer from it", true);
            default -> status >= 500
                    ? new HttpRefusal(status, "the server or a proxy failed without a ClickHouse error", true)
                    : new HttpRefusal(status, "the server or a proxy refused the request without a ClickHouse error "
                    + "(check the host, port and any proxy in between)", false);
        };
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
