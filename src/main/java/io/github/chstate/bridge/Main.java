package io.github.chstate.bridge;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.protocol.BridgeService;
import io.github.chstate.bridge.protocol.Dispatcher;
import io.github.chstate.bridge.protocol.Json;
import io.github.chstate.bridge.protocol.StdioServer;
import org.slf4j.LoggerFactory;

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.time.Duration;

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
        BridgeService service = new BridgeService(json, Clock.SYSTEM);
        try {
            new StdioServer(new FileInputStream(FileDescriptor.in), protocolOut,
                    new Dispatcher(json, service), service::shutdownRequested, Runtime.getRuntime().maxMemory() / 4).run();
        } finally {
            Thread watchdog = haltAfter(service.closeDeadline());
            service.close();
            watchdog.interrupt();
        }
        protocolOut.flush();
        System.exit(0);
    }

    /**
     * Closing writes what is pending and releases the locks this bridge kept, which takes statements, and the shim
     * does not wait for it when Meltano exits (it flushed before): a server that does not answer then must not keep the
     * bridge alive. A lock not released goes stale.
     */
    private static Thread haltAfter(Duration deadline) {
        Thread watchdog = new Thread(() -> {
            try {
                Clock.SYSTEM.sleep(deadline);
            } catch (InterruptedException e) {
                return;
            }
            LoggerFactory.getLogger(Main.class).warn("Closing took over {} s; exiting without it (a state not written "
                    + "yet is lost, an older one stays; a lock this bridge kept goes stale after lock_timeout_seconds).",
                    deadline.toSeconds());
            Runtime.getRuntime().halt(1);
        }, "exit-deadline");
        watchdog.setDaemon(true);
        watchdog.start();
        return watchdog;
    }
}
