package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;

import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.Arrays;
import java.util.function.BooleanSupplier;

/**
 * The framing: one JSON-RPC message per line in, one response per line out, flushed. Lines are read here, not by
 * jsonrpc4j, whose stream reader buffers ahead and loses pipelined messages. Requests are served one at a time. A line
 * longer than {@code maxMessageBytes} is skipped and refused, before it can take the heap.
 */
public final class StdioServer {
    private final InputStream in;
    private final Counted out;
    private final Dispatcher dispatcher;
    private final BooleanSupplier stopRequested;
    private final long maxMessageBytes;
    /**
     * A line longer than this is read into a buffer of its own, dropped after it: a 50 MB state is not kept. A message
     * and its answer this large together are followed by a full collection: Java 25's serial collector grows the old
     * generation rather than collect it as such states' arrays are promoted (five 10 MB set + get peaked at 395 MB RSS
     * against 150 MB on Java 17; 141 MB with the collection, which takes ~20–30 ms beside the ~250 ms of such a call).
     */
    private static final int KEPT_LINE_BYTES = 4 << 20;
    private final byte[] chunk = new byte[1 << 16];
    private int next;
    private int end;
    /** The current line is {@code line[0, length)}; the buffer is reused, so that a state's bytes are copied once. */
    private byte[] line = new byte[1 << 16];
    private int length;
    private boolean lineTooLong;

    public StdioServer(InputStream in, OutputStream out, Dispatcher dispatcher, BooleanSupplier stopRequested,
                       long maxMessageBytes) {
        this.in = in;
        this.out = new Counted(out);
        this.dispatcher = dispatcher;
        this.stopRequested = stopRequested;
        this.maxMessageBytes = maxMessageBytes;
    }

    /** Serves until end of input or a stop request. */
    public void run() throws IOException {
        while (!stopRequested.getAsBoolean() && readLine()) {
            if (!lineTooLong && isBlank()) {
                continue;
            }
            JsonNode response = lineTooLong ? dispatcher.tooLarge(maxMessageBytes) : dispatcher.handle(line, length);
            if (line.length > KEPT_LINE_BYTES) {
                line = new byte[1 << 16];
            }
            out.written = 0;
            if (response != null) {
                dispatcher.write(response, out);
                out.write('\n');
                out.flush();
            }
            if (length + out.written > KEPT_LINE_BYTES) {
                System.gc();
            }
        }
    }

    /** The output, counting what the current answer wrote. */
    private static final class Counted extends FilterOutputStream {
        long written;

        Counted(OutputStream out) {
            super(out);
        }

        @Override
        public void write(int b) throws IOException {
            out.write(b);
            written++;
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
            written += len;
        }
    }

    /**
     * Reads the next line, without its newline, into {@code line}; false at the end of input. A line too long is read
     * to its end and kept empty.
     */
    private boolean readLine() throws IOException {
        length = 0;
        lineTooLong = false;
        while (true) {
            if (next == end) {
                end = in.read(chunk);
                next = 0;
                if (end == -1) {
                    end = 0;
                    return length > 0 || lineTooLong;
                }
            }
            int start = next;
            next = lineEnd(chunk, next, end);
            if (!lineTooLong && length + (long) (next - start) > maxMessageBytes) {
                lineTooLong = true; // read on to the end of the line, keeping nothing
                length = 0;
            }
            if (!lineTooLong) {
                append(start, next - start);
            }
            if (next < end) {
                next++; // past the newline; what follows it stays in chunk for the next line
                return true;
            }
        }
    }

    /** The index of the first newline in {@code bytes[from, to)}, else {@code to}; in locals, as C1 keeps them. */
    private static int lineEnd(byte[] bytes, int from, int to) {
        int i = from;
        while (i < to && bytes[i] != '\n') {
            i++;
        }
        return i;
    }

    private void append(int from, int count) {
        if (length + count > line.length) {
            line = Arrays.copyOf(line, (int) Math.min(Math.max(line.length * 2L, (long) length + count), Integer.MAX_VALUE - 8));
        }
        System.arraycopy(chunk, from, line, length, count);
        length += count;
    }

    private boolean isBlank() {
        for (int i = 0; i < length; i++) {
            if (!Character.isWhitespace(line[i])) {
                return false;
            }
        }
        return true;
    }
}
