/**
 * JSON-RPC 2.0 on stdin/stdout, in three parts that are tested alone: framing ({@link
 * io.github.chstate.bridge.protocol.MessageReader}, {@link io.github.chstate.bridge.protocol.StdioServer}), dispatch
 * ({@link io.github.chstate.bridge.protocol.Dispatcher}) and error mapping ({@link
 * io.github.chstate.bridge.protocol.ErrorMapper}); {@link io.github.chstate.bridge.protocol.BridgeService} checks each
 * call and hands it to the store. Imports every package but the root ({@code Main} wires it all).
 */
package io.github.chstate.bridge.protocol;
