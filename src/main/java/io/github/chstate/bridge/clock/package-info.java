/**
 * The bridge's one source of time, {@link io.github.chstate.bridge.clock.Clock}: given to {@code ClickHouse}, taken
 * from there by everything that measures ages and deadlines or pauses, so that a test can drive it. Imports nothing
 * of ours; every other package may import it.
 */
package io.github.chstate.bridge.clock;
