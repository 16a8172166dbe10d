package io.github.chstate.bridge.lock;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.UUID;

/**
 * The Meltano command a run lease is held for, as the shim describes it in {@code initialize}. A lease's token in
 * the lock table is this as JSON (with a fresh id and the time it was taken), so that whoever finds the lease taken
 * can say by whom; a plain lock's token is a bare UUID.
 *
 * @param id      the Meltano process's own id: a lease of the same id is this run's, left by a bridge that died
 * @param host    the host name of the Meltano process
 * @param pid     its process id
 * @param command what it runs, e.g. {@code meltano run tap-x target-y}
 * @param force   {@code --force}: take the lease over from another run
 */
public record Run(String id, String host, long pid, String command, boolean force) {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final DateTimeFormatter UTC = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss 'UTC'")
            .withZone(ZoneOffset.UTC);

    /** A lease found in the lock table: the run that holds it and when it took it. */
    public record Holder(String run, String host, long pid, String command, long since) {
        /** E.g. "`meltano run tap-x target-y` (host h, pid 12), running since 2026-12-06 12:00:01 UTC". */
        public String describe() {
            return "`" + command + "` (host " + host + ", pid " + pid + "), running since "
                    + UTC.format(Instant.ofEpochMilli(since));
        }
    }

    /** A new token for a lease of this run taken at {@code nowMillis}. */
    String newToken(long nowMillis) {
        try {
            return JSON.writeValueAsString(new Token(UUID.randomUUID().toString(), id, host, pid, command,
                    nowMillis));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The run holding a lease with this token; null for a plain lock's token. */
    public static Holder holder(String token) {
        if (token == null || !token.startsWith("{")) {
            return null;
        }
        try {
            Token t = JSON.readValue(token, Token.class);
            return new Holder(t.run, t.host, t.pid, t.command, t.since);
        } catch (JsonProcessingException e) {
            return null;
        }
    }

    private record Token(String token, String run, String host, long pid, String command, long since) {
    }
}
