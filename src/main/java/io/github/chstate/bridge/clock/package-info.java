/**
 * The bridge's one source of time, {@link io.github.chstate.bridge.clock.Clock}, and its background timers
 * ({@link io.github.chstate.bridge.clock.Timer}): given to {@code BridgeService}, held by {@code ClickHouse}, taken from
 * there by everything that measures ages and deadlines, pauses or schedules; a test drives its own. Imports nothing of
 * ours; every other package may import it.
 */
package io.github.chstate.bridge.clock;
