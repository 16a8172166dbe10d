/**
 * Talking to ClickHouse: the connection pool and statements ({@link io.github.chstate.bridge.clickhouse.ClickHouse}),
 * the one retry policy ({@link io.github.chstate.bridge.clickhouse.Retry}, which is given what to retry and knows no
 * client), what a server's error says ({@link io.github.chstate.bridge.clickhouse.ServerErrors}), SQL text and
 * RowBinary data. Knows nothing of states or locks. Imports {@code config}, {@code clock} and {@code error}.
 */
package io.github.chstate.bridge.clickhouse;
