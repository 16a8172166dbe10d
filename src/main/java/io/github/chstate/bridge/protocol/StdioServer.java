package io.github.chstate.bridge.protocol;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.function.BooleanSupplier;

/**
 * The framing: one JSON-RPC message per line in, one response per line out, flushed. Lines are read here, not by
 * jsonrpc4j, whose stream reader buffers ahead and loses pipelined messages. Requests are served one at a time.
 */
public final class StdioServer {
    private final InputStream in;
    private final OutputStream out;
    private final Dispatcher dispatcher;
    private final BooleanSupplier stopRequested;
    private final ByteArrayOutputStream buffer = new ByteArrayOutputStream(8192);
    private final byte[] chunk = new byte[1 << 16];
    private int next;
    private int end;

    public StdioServer(InputStream in, OutputStream out, Dispatcher dispatcher, BooleanSupplier stopRequested) {
        this.in = in;
        this.out = out;
        this.dispatcher = dispatcher;
        this.stopRequested = stopRequested;
    }

    /** Serves until end of input or a stop request. */
    public void run() throws IOException {
        byte[] line;
        while (!stopRequested.getAsBoolean() && (line = readLine()) != null) {
            if (isBlank(line)) {
                continue;
            }
            byte[] response = dispatcher.handle(line);
            if (response.length > 0) {
                out.write(response);
                out.write('\n');
                out.flush();
            }
        }
    }

    private byte[] readLine() throws IOException {
        buffer.reset();
        while (true) {
            if (next == end) {
                end = in.read(chunk);
                next = 0;
                if (end == -1) {
                    end = 0;
                    return buffer.size() > 0 ? buffer.toByteArray() : null;
                }
            }
            int start = next;
            while (next < end && chunk[next] != '\n') {
                next++;
            }
            buffer.write(chunk, start, next - start);
            if (next < end) {
                next++; // past the newline; what follows it stays in chunk for the next line
                return buffer.toByteArray();
            }
        }
    }

    private static boolean isBlank(byte[] line) {
        for (byte b : line) {
            if (!Character.isWhitespace(b)) {
                return false;
            }
        }
        return true;
    }
}
