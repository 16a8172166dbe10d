package io.github.chstate.bridge.store;

/** Literals and identifiers for ClickHouse SQL. Every value that reaches a statement goes through here. */
final class Sql {
    private Sql() {
    }

    /** A ClickHouse string literal: quotes, backslashes and control characters escaped. */
    static String literal(String value) {
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
    static String nullableLiteral(String value) {
        return value == null ? "NULL" : literal(value);
    }

    /** A back-quoted identifier. */
    static String identifier(String name) {
        return '`' + name.replace("\\", "\\\\").replace("`", "\\`") + '`';
    }

    /**
     * Meltano's glob (anchored; {@code *} any run, {@code ?} one character) as a LIKE pattern literal, where
     * LIKE's own {@code %}, {@code _} and {@code \} in the glob match literally.
     */
    static String likePattern(String glob) {
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
