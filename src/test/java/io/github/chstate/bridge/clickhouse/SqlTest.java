package io.github.chstate.bridge.clickhouse;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

class SqlTest {
    @Test
    void literalsEscapeQuotesBackslashesAndControlCharacters() {
        assertEquals("'plain'", Sql.literal("plain"));
        assertEquals("'it\\'s'", Sql.literal("it's"));
        assertEquals("'a\\\\b'", Sql.literal("a\\b"));
        assertEquals("'\\\\\\''", Sql.literal("\\'"));
        assertEquals("'l1\\nl2\\r\\t\\0'", Sql.literal("l1\nl2\r\t\0"));
        assertEquals("'ünï ✓'", Sql.literal("ünï ✓"));
        assertEquals("NULL", Sql.nullableLiteral(null));
    }

    @Test
    void identifiersAreBackQuoted() {
        assertEquals("`state`", Sql.identifier("state"));
        assertEquals("`a\\`b`", Sql.identifier("a`b"));
    }

    @Test
    void globsBecomeAnchoredRegularExpressionsAsFnmatchBuildsThem() {
        assertEquals("(?s)^dev:.*$", Sql.globRegex("dev:*"));
        assertEquals("(?s)^a.b$", Sql.globRegex("a?b"));
        assertEquals("(?s)^100%_\\.x$", Sql.globRegex("100%_.x"));
        assertEquals("(?s)^a[x]b$", Sql.globRegex("a[x]b"));
        assertEquals("(?s)^[^a-c]$", Sql.globRegex("[!a-c]"));
        assertEquals("(?s)^[^a\\-]$", Sql.globRegex("[!a-]"));
        assertEquals("(?s)^\\[x$", Sql.globRegex("[x"));
    }
}
