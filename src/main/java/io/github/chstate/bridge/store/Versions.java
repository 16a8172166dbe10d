package io.github.chstate.bridge.store;

import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;

import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;

/** A version of a state is its {@code updated_at} in milliseconds; shown and given as an ISO-8601 UTC time. */
public final class Versions {
    private static final DateTimeFormatter ISO_MILLIS = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
            .withZone(ZoneOffset.UTC);

    private Versions() {
    }

    static String format(long millis) {
        return ISO_MILLIS.format(Instant.ofEpochMilli(millis));
    }

    /**
     * A version number from the history, or a time: 2026-12-04T10:00:00Z, with an offset, or without (UTC); a date
     * alone is its midnight, UTC.
     */
    public static long parse(String at) {
        String text = at == null ? "" : at.strip();
        if (text.matches("\\d+")) {
            return Long.parseLong(text);
        }
        try {
            return Instant.parse(text).toEpochMilli();
        } catch (DateTimeParseException notInstant) {
            try {
                return java.time.OffsetDateTime.parse(text).toInstant().toEpochMilli();
            } catch (DateTimeParseException notOffset) {
                try {
                    return text.length() == 10 ? java.time.LocalDate.parse(text).atStartOfDay().toInstant(ZoneOffset.UTC).toEpochMilli()
                            : LocalDateTime.parse(text.replace(' ', 'T')).toInstant(ZoneOffset.UTC).toEpochMilli();
                } catch (DateTimeParseException e) {
                    throw new BridgeException(ErrorCode.INVALID_PARAMS, "'at' must be a version from the history (a "
                            + "number) or a time such as 2026-12-04T10:00:00Z (UTC when no offset is given), got '" + at + "'");
                }
            }
        }
    }
}
