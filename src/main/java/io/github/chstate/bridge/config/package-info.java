/**
 * The settings: the {@code initialize} call's map parsed and checked into one {@link
 * io.github.chstate.bridge.config.Settings} record, with an error naming each bad setting. Imports only {@code error}.
 */
package io.github.chstate.bridge.config;
