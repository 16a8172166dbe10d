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
    void globsBecomeLikePatternsWithSqlWildcardsEscaped() {
        assertEquals("'dev:%'", Sql.likePattern("dev:*"));
        assertEquals("'a_b'", Sql.likePattern("a?b"));
        assertEquals("'100\\\\%\\\\_'", Sql.likePattern("100%_"));
        assertEquals("'back\\\\\\\\slash'", Sql.likePattern("back\\slash"));
        assertEquals("'it\\'s%'", Sql.likePattern("it's*"));
        assertEquals("'[x]'", Sql.likePattern("[x]"));
    }
}
