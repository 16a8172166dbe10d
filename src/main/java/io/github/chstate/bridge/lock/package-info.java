/**
 * The lock per state id that keeps two runs of one pipeline apart: the interface the store uses ({@link
 * io.github.chstate.bridge.lock.StateLock}), its two kinds ({@link io.github.chstate.bridge.lock.ClaimLock} on a
 * single node, {@link io.github.chstate.bridge.lock.KeeperLock} everywhere KeeperMap runs), the kept-lock wrapper
 * both extend ({@link io.github.chstate.bridge.lock.KeepingLock}), their tables and the choice between them ({@link
 * io.github.chstate.bridge.lock.Locks}). Why each grants one holder at a time: docs/lock.md. Imports {@code
 * clickhouse}, {@code config}, {@code clock} and {@code error}; never {@code store}.
 */
package io.github.chstate.bridge.lock;
