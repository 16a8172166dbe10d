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
     * A glob as Meltano's other backends match it ({@code fnmatch}: {@code *} any run, {@code ?} one character,
     * {@code [seq]} and {@code [!seq]} one character in or not in seq, with ranges; a {@code [} without its {@code ]}
     * is itself; nothing else is special) as an anchored RE2 regular expression, the way Python's
     * {@code fnmatch.translate} builds its own.
     */
    public static String globRegex(String glob) {
        StringBuilder re = new StringBuilder("(?s)^");
        int n = glob.length();
        for (int i = 0; i < n; ) {
            char c = glob.charAt(i++);
            if (c == '*') {
                if (!re.toString().endsWith(".*")) {
                    re.append(".*");
                }
            } else if (c == '?') {
                re.append('.');
            } else if (c == '[') {
                int j = i;
                if (j < n && glob.charAt(j) == '!') {
                    j++;
                }
                if (j < n && glob.charAt(j) == ']') {
                    j++;
                }
                while (j < n && glob.charAt(j) != ']') {
                    j++;
                }
                if (j >= n) {
                    re.append("\\[");
                } else {
                    re.append(characterSet(glob.substring(i, j)));
                    i = j + 1;
                }
            } else {
                quote(re, c);
            }
        }
        return re.append('$').toString();
    }

    /** The inside of a glob's {@code [...]} as a RE2 class; a reversed range matches nothing, as in fnmatch. */
    private static String characterSet(String set) {
        boolean negated = set.startsWith("!");
        String chars = negated ? set.substring(1) : set;
        StringBuilder items = new StringBuilder();
        for (int k = 0; k < chars.length(); ) {
            if (k + 2 < chars.length() && chars.charAt(k + 1) == '-') {
                char lo = chars.charAt(k);
                char hi = chars.charAt(k + 2);
                if (lo <= hi) {
                    quote(items, lo);
                    items.append('-');
                    quote(items, hi);
                }
                k += 3;
            } else {
                quote(items, chars.charAt(k++));
            }
        }
        if (items.isEmpty()) {
            return negated ? "." : "[^\\x{0}-\\x{10FFFF}]"; // every range reversed: all, or nothing
        }
        return (negated ? "[^" : "[") + items + "]";
    }

    /** Appends {@code c} so that RE2 reads it as itself, inside a class or out. */
    private static void quote(StringBuilder re, char c) {
        if ("\\.+*?()|[]{}^$-".indexOf(c) >= 0) {
            re.append('\\');
        }
        re.append(c);
    }
}
