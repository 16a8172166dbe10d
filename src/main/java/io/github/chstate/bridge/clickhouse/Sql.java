package io.github.chstate.bridge.clickhouse;

/**
 * Literals and identifiers for ClickHouse SQL, and the DDL pieces all our tables share. Every value that reaches a
 * statement goes through here.
 */
public final class Sql {
    /** Where a Replicated table keeps its replicas in Keeper. */
    public static final String REPLICA_PATH = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'";

    private Sql() {
    }

    /** The {@code ON CLUSTER} clause of DDL; empty for a single node (cluster null). */
    public static String onCluster(String cluster) {
        return cluster == null ? "" : " ON CLUSTER " + identifier(cluster);
    }

    /** The engine of an append-only table: replicated on a cluster (Cloud makes a plain one Shared by itself). */
    public static String mergeTree(String cluster) {
        return cluster != null ? "ReplicatedMergeTree(" + REPLICA_PATH + ")" : "MergeTree";
    }

    /** A ClickHouse string literal: quotes, backslashes and control characters escaped. */
    public static String literal(String value) {
        StringBuilder out = new StringBuilder(value.length() + 16).append('\'');
        int copied = 0; // value[copied, i) needs no escape: copied in one go
        for (int i = 0; i < value.length(); i++) {
            String escape = switch (value.charAt(i)) {
                case '\'' -> "\\'";
                case '\\' -> "\\\\";
                case '\n' -> "\\n";
                case '\r' -> "\\r";
                case '\t' -> "\\t";
                case '\0' -> "\\0";
                default -> null;
            };
            if (escape != null) {
                out.append(value, copied, i).append(escape);
                copied = i + 1;
            }
        }
        return out.append(value, copied, value.length()).append('\'').toString();
    }

    /** NULL for null, else a string literal. */
    public static String nullableLiteral(String value) {
        return value == null ? "NULL" : literal(value);
    }

    /** A back-quoted identifier. */
    public static String identifier(String name) {
        return '`' + name.replace("\\", "\\\\").replace("`", "\\`") + '`';
    }

    /**
     * Meltano's glob (anchored; {@code *} any run, {@code ?} one character) as a LIKE pattern literal, where
     * LIKE's own {@code %}, {@code _} and {@code \} in the glob match literally.
     */
    public static String likePattern(String glob) {
        StringBuilder like = new StringBuilder(glob.length() + 8);
        for (int i = 0; i < glob.length(); i++) {
            char c = glob.charAt(i);
            switch (c) {
                case '*' -> like.append('%');
                case '?' -> like.append('_');
                case '%', '_', '\\' -> like.append('\\').append(c);
                default -> like.append(c);
            }
        }
        return literal(like.toString());
    }
}
