package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.function.BooleanSupplier;

/**
 * The framing: one JSON-RPC message per line in, one response per line out, flushed. Lines are read here, not by
 * jsonrpc4j, whose stream reader buffers ahead and loses pipelined messages. Requests are served one at a time. A line
 * longer than {@code maxMessageBytes} is skipped and refused, before it can take the heap.
 */
public final class StdioServer {
    private final InputStream in;
    private final OutputStream out;
    private final Dispatcher dispatcher;
    private final BooleanSupplier stopRequested;
    private final long maxMessageBytes;
    private final byte[] chunk = new byte[1 << 16];
    private int next;
    private int end;
    private boolean lineTooLong;

    public StdioServer(InputStream in, OutputStream out, Dispatcher dispatcher, BooleanSupplier stopRequested,
                       long maxMessageBytes) {
        this.in = in;
        this.out = out;
        this.dispatcher = dispatcher;
        this.stopRequested = stopRequested;
        this.maxMessageBytes = maxMessageBytes;
    }

    /** Serves until end of input or a stop request. */
    public void run() throws IOException {
        byte[] line;
        while (!stopRequested.getAsBoolean() && (line = readLine()) != null) {
            if (!lineTooLong && isBlank(line)) {
                continue;
            }
            JsonNode response = lineTooLong ? dispatcher.tooLarge(maxMessageBytes) : dispatcher.handle(line);
            if (response != null) {
                dispatcher.write(response, out);
                out.write('\n');
                out.flush();
            }
        }
    }

    /** The next line, without its newline; null at the end of input. A line too long comes back empty. */
    private byte[] readLine() throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream(8192); // not kept: a 50 MB state would stay in memory
        lineTooLong = false;
        while (true) {
            if (next == end) {
                end = in.read(chunk);
                next = 0;
                if (end == -1) {
                    end = 0;
                    return line.size() > 0 || lineTooLong ? line.toByteArray() : null;
                }
            }
            int start = next;
            while (next < end && chunk[next] != '\n') {
                next++;
            }
            if (!lineTooLong && line.size() + (long) (next - start) > maxMessageBytes) {
                lineTooLong = true; // read on to the end of the line, keeping nothing
                line = new ByteArrayOutputStream(0);
            }
            if (!lineTooLong) {
                line.write(chunk, start, next - start);
            }
            if (next < end) {
                next++; // past the newline; what follows it stays in chunk for the next line
                return line.toByteArray();
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
