/**
 * The one exception every layer throws, {@link io.github.chstate.bridge.error.BridgeException}, with its JSON-RPC
 * {@link io.github.chstate.bridge.error.ErrorCode}: a message that says what to do, and the code the shim maps to
 * Meltano's errors. Imports nothing of ours; every other package may import it.
 */
package io.github.chstate.bridge.error;
