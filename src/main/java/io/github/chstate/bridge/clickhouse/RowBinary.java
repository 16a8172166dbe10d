package io.github.chstate.bridge.clickhouse;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

/**
 * The RowBinary encodings of the state table's column types: what an INSERT sends and a read of states gets as data,
 * not as SQL or JDBC values, so that a state's bytes are never turned into a String.
 */
public final class RowBinary {
    private RowBinary() {
    }

    /** String: its UTF-8 length as an unsigned LEB128 number, then the bytes. */
    public static void string(OutputStream out, String value) throws IOException {
        bytes(out, value.getBytes(StandardCharsets.UTF_8));
    }

    /** Nullable(String) from UTF-8: a byte saying NULL (1) or not (0), then the string if not. */
    public static void nullableBytes(OutputStream out, byte[] utf8) throws IOException {
        out.write(utf8 == null ? 1 : 0);
        if (utf8 != null) {
            bytes(out, utf8);
        }
    }

    private static void bytes(OutputStream out, byte[] utf8) throws IOException {
        long length = utf8.length;
        while (length >= 0x80) {
            out.write((int) (length & 0x7F) | 0x80);
            length >>>= 7;
        }
        out.write((int) length);
        out.write(utf8);
    }

    /** DateTime64(3): milliseconds since the epoch, as a little-endian Int64. */
    public static void dateTime64Millis(OutputStream out, long millis) throws IOException {
        for (int i = 0; i < 8; i++) {
            out.write((int) (millis >>> (8 * i)) & 0xFF);
        }
    }

    /** Nullable(String) as UTF-8 bytes; null for NULL. */
    public static byte[] readNullableBytes(InputStream in) throws IOException {
        return readByte(in) == 1 ? null : readBytes(in);
    }

    public static String readString(InputStream in) throws IOException {
        return new String(readBytes(in), StandardCharsets.UTF_8);
    }

    public static long readInt64(InputStream in) throws IOException {
        long value = 0;
        for (int i = 0; i < 8; i++) {
            value |= (long) readByte(in) << (8 * i);
        }
        return value;
    }

    private static byte[] readBytes(InputStream in) throws IOException {
        long length = 0;
        for (int shift = 0; ; shift += 7) {
            int b = readByte(in);
            length |= (long) (b & 0x7F) << shift;
            if (b < 0x80) {
                break;
            }
        }
        if (length > Integer.MAX_VALUE - 8) {
            throw new IOException("a string of " + length + " bytes is more than the bridge can hold");
        }
        byte[] bytes = new byte[(int) length]; // read into place: readNBytes(n) would gather and copy a large state
        if (in.readNBytes(bytes, 0, bytes.length) < length) {
            throw new EOFException("the server's answer ended inside a string");
        }
        return bytes;
    }

    private static int readByte(InputStream in) throws IOException {
        int b = in.read();
        if (b < 0) {
            throw new EOFException("the server's answer ended inside a row");
        }
        return b;
    }
}
