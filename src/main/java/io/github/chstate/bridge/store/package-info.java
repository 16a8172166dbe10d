/**
 * The state table and its statements: reads, writes under and outside the lock with the write interval ({@link
 * io.github.chstate.bridge.store.StateStore}), the history and restore ({@link
 * io.github.chstate.bridge.store.StateHistory}), the tables' DDL per deployment, and {@code check}'s findings.
 * Imports {@code lock}, {@code clickhouse}, {@code config}, {@code clock} and
 * {@code error}.
 */
package io.github.chstate.bridge.store;
