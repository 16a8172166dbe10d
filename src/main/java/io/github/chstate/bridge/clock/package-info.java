/**
 * The bridge's one source of time, {@link io.github.chstate.bridge.clock.Clock}: held by {@code ClickHouse}, taken
 * from there by everything that measures ages and deadlines or pauses; a test can drive its own. Imports nothing
 * of ours; every other package may import it.
 */
package io.github.chstate.bridge.clock;
