package io.github.chstate.bridge;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Dispatcher;
import io.github.chstate.bridge.protocol.StdioServer;
import io.github.chstate.bridge.store.ClickHouse;

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.OutputStream;

/** Serves the protocol on stdin/stdout until stdin closes or {@code shutdown} is called; exits 0. */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        // stdout is the protocol channel: keep the real one for responses and send everything else printed to stderr.
        OutputStream protocolOut = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
        System.setOut(System.err);
        // The driver speaks stateless HTTP and heals broken connections itself: skip Hikari's ping-before-borrow.
        System.setProperty("com.zaxxer.hikari.aliveBypassWindowMs", "60000");
        // The driver's one-time set-up takes the second core while Jackson and jsonrpc4j start on this one.
        Thread warmUp = new Thread(ClickHouse::warmUp, "driver-warm-up");
        warmUp.setDaemon(true);
        warmUp.start();

        ObjectMapper json = Json.mapper();
        BridgeService service = new BridgeService(json);
        try (service) {
            new StdioServer(new FileInputStream(FileDescriptor.in), protocolOut,
                    new Dispatcher(json, service), service::shutdownRequested, Runtime.getRuntime().maxMemory() / 4).run();
        }
        protocolOut.flush();
        System.exit(0);
    }
}
