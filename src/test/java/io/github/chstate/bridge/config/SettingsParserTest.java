package io.github.chstate.bridge.config;

import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SettingsParserTest {
    private static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new HashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    private static BridgeException rejected(Object... kv) {
        return rejected(ErrorCode.CONFIGURATION, kv);
    }

    private static BridgeException rejected(ErrorCode code, Object... kv) {
        BridgeException e = assertThrows(BridgeException.class, () -> SettingsParser.parse(map(kv)));
        assertEquals(code, e.code());
        return e;
    }

    @Test
    void uriGivesEverythingAndIsPercentDecoded() {
        Settings s = SettingsParser.parse(map("uri", "clickhouse://meltano%40corp:p%40ss%3Aw%2Frd+x@ch.example.com:9000/ware%20house"));
        assertEquals("meltano@corp", s.user());
        assertEquals("p@ss:w/rd+x", s.password());
        assertEquals("ch.example.com", s.host());
        assertEquals(9000, s.port());
        assertEquals("ware house", s.database());
        assertEquals("meltano", s.schema());
        assertEquals("state", s.table());
        assertFalse(s.secure());
        assertEquals(Duration.ofSeconds(10), s.lockTimeout());
        assertEquals(Duration.ofSeconds(1), s.lockRetry());
    }

    @Test
    void settingsOverrideTheUriAndNullMeansUnset() {
        Settings s = SettingsParser.parse(map("uri", "clickhouse://u:p@h:8123/db", "host", "other", "port", "9999",
                "user", null, "password", "new", "schema", "st", "table", "t2", "secure", "true",
                "lock_timeout_seconds", 2.5, "lock_retry_seconds", "0.2"));
        assertEquals("other", s.host());
        assertEquals(9999, s.port());
        assertEquals("u", s.user());
        assertEquals("new", s.password());
        assertEquals("st", s.schema());
        assertEquals("t2", s.table());
        assertTrue(s.secure());
        assertEquals(Duration.ofMillis(2500), s.lockTimeout());
        assertEquals(Duration.ofMillis(200), s.lockRetry());
        assertEquals("jdbc:clickhouse:https://other:9999/db", s.jdbcUrl());
    }

    @Test
    void defaultsWithoutUri() {
        Settings s = SettingsParser.parse(map("database", "db", "user", "u"));
        assertEquals("localhost", s.host());
        assertEquals(8123, s.port());
        assertEquals("", s.password());
        assertEquals(8443, SettingsParser.parse(map("database", "db", "user", "u", "secure", true)).port());
        assertEquals(8443, SettingsParser.parse(map("uri", "clickhouse://u@h/db", "secure", "1")).port());
    }

    @Test
    void ipv6Host() {
        Settings s = SettingsParser.parse(map("uri", "clickhouse://u@[::1]:8123/db"));
        assertEquals("::1", s.host());
        assertEquals("jdbc:clickhouse:http://[::1]:8123/db", s.jdbcUrl());
    }

    @Test
    void badValuesNameTheSetting() {
        assertTrue(rejected("uri", "clickhouse://u@h/db", "port", "eighty").getMessage().contains("'port'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "port", 70000).getMessage().contains("between 1 and 65535"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "secure", "maybe").getMessage().contains("'secure'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "schema", "x; DROP").getMessage().contains("'schema'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "table", "a`b").getMessage().contains("'table'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "lock_timeout_seconds", 0).getMessage().contains("'lock_timeout_seconds'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "lock_retry_seconds", "soon").getMessage().contains("'lock_retry_seconds'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "schema", "s".repeat(300)).getMessage()
                .contains("'schema' must be at most 180 characters"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "table", "t".repeat(181)).getMessage()
                .contains("'table' must be at most 180 characters"));
        assertEquals("t".repeat(180), SettingsParser.parse(map("uri", "clickhouse://u@h/db", "table", "t".repeat(180))).table());
        assertTrue(rejected("uri", "postgresql://u@h/db").getMessage().contains("clickhouse://"));
        assertTrue(rejected("uri", "clickhouse://u@h/db?secure=true").getMessage().contains("state_backend.clickhouse"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "colour", "red").getMessage().contains("'colour'"));
        assertTrue(rejected("uri", "clickhouse://u@h/db", "retry_budget_seconds", -1).getMessage().contains("0 or more"));
        BridgeException port = rejected("uri", "clickhouse://u:pw@h:eighty/db");
        assertTrue(port.getMessage().contains("port that is not a number: 'eighty'") && !port.getMessage().contains("pw"),
                port.getMessage());
    }

    @Test
    void everyBadValueIsNamedInOneErrorALineEach() {
        BridgeException e = rejected("uri", "clickhouse://u@h/db", "port", "eighty", "secure", "maybe", "lock", "bogus",
                "history_days", "forever", "write_interval_seconds", "x", "schema", "1st");
        assertEquals(List.of("Setting 'secure' must be true or false, got 'maybe'",
                "Setting 'port' must be a whole number, got 'eighty'",
                "Setting 'schema' must be a plain ClickHouse identifier (letters, digits, underscore; not starting with a digit), got '1st'",
                "Setting 'lock' must be one of [auto, keeper, claims], got 'bogus'",
                "Setting 'history_days' must be a whole number, got 'forever'",
                "Setting 'write_interval_seconds' must be a number of seconds, got 'x'"),
                List.of(e.getMessage().split("\n")));
    }

    @Test
    void theRetryBudgetMayBeZero() {
        assertEquals(0, SettingsParser.parse(map("uri", "clickhouse://u@h/db", "retry_budget_seconds", 0)).retryBudget().toMillis());
        assertEquals(60_000, SettingsParser.parse(map("uri", "clickhouse://u@h/db")).retryBudget().toMillis());
    }

    @Test
    void missingRequiredSettingsSayWhereToPutThem() {
        assertTrue(rejected(ErrorCode.MISSING_SETTING, "uri", "clickhouse://u@h:8123").getMessage().contains("Missing setting 'database'"));
        assertTrue(rejected(ErrorCode.MISSING_SETTING, "uri", "clickhouse://h:8123/db").getMessage().contains("Missing setting 'user'"));
    }

    @Test
    void aBrokenUriNeverEchoesThePassword() {
        BridgeException e = rejected("uri", "clickhouse://u:sec ret^pw@h/db");
        assertFalse(e.getMessage().contains("sec ret^pw"), e.getMessage());
    }

    @Test
    void toStringHasNoPassword() {
        Settings s = SettingsParser.parse(map("uri", "clickhouse://u:hunter2@h/db"));
        assertFalse(s.toString().contains("hunter2"));
        assertTrue(s.toString().contains("u@h"));
    }
}
