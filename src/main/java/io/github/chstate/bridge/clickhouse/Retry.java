package io.github.chstate.bridge.clickhouse;

import com.clickhouse.client.api.ConnectionInitiationException;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.error.BridgeException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.ConnectException;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.sql.SQLTransientConnectionException;
import java.time.Duration;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The one retry policy of every statement (the driver's own retries are off): a statement that failed for a passing
 * reason — the network, a restarting, busy or recovering server — is sent again, with backoff, until
 * {@code retry_budget_seconds} have passed since its first try; then the error goes to the caller, saying how long
 * it was tried. A server never reached yet is not waited for: a wrong host or port fails at once.
 *
 * <p>Sending any of our statements twice is safe, which is what makes this possible. Reads change nothing. A state
 * INSERT inserts its rows only if their version is above every stored one, so once a try arrived, the next inserts
 * nothing (and on replicated tables its deduplication token, the same on every try, drops it too). DDL is
 * {@code IF NOT EXISTS}, DELETE and TRUNCATE are idempotent. Lock statements: a claim or release row sent twice
 * is the same token's row twice, which counts once (the claims lock groups by token); a keeper take-over sent twice
 * finds its own token and changes nothing, a create sent twice fails with "Node exists", and both are followed by a
 * read of the owner (the keeper lock). Keeper's conflicts ("Node exists", "Bad version") are answers, not
 * failures, and are never retried.
 */
final class Retry {
    /** What a statement does on one try. */
    @FunctionalInterface
    interface Attempt<T> {
        T run() throws Exception;
    }

    /**
     * ClickHouse error codes that mean "try again": the statement failed because of a passing state of the server,
     * its network or Keeper, never because of the statement itself.
     */
    static final Map<Integer, String> TRANSIENT_CODES = Map.ofEntries(
            Map.entry(3, "UNEXPECTED_END_OF_FILE: the request body was cut off on its way"),
            Map.entry(159, "TIMEOUT_EXCEEDED: the server is overloaded"),
            Map.entry(202, "TOO_MANY_SIMULTANEOUS_QUERIES: the server is busy"),
            Map.entry(203, "NO_FREE_CONNECTION: the server is busy"),
            Map.entry(209, "SOCKET_TIMEOUT: between servers"),
            Map.entry(210, "NETWORK_ERROR: between servers"),
            Map.entry(225, "NO_ZOOKEEPER: Keeper is not reachable right now"),
            Map.entry(242, "TABLE_IS_READ_ONLY: the replica lost its Keeper session and is getting it back"),
            Map.entry(252, "TOO_MANY_PARTS: inserts are throttled until merges catch up"),
            Map.entry(285, "TOO_FEW_LIVE_REPLICAS: a quorum is not available right now"),
            Map.entry(286, "UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE: an earlier insert still waits for its quorum"),
            Map.entry(289, "REPLICA_IS_NOT_IN_QUORUM: this replica has not caught up yet"),
            Map.entry(319, "UNKNOWN_STATUS_OF_INSERT: the insert may have landed; its version check makes a "
                    + "second one safe"),
            Map.entry(999, "KEEPER_EXCEPTION: connection to Keeper lost or timed out"));
    private static final Duration FIRST_PAUSE = Duration.ofMillis(100);
    private static final Duration LONGEST_PAUSE = Duration.ofSeconds(5);
    private static final Logger log = LoggerFactory.getLogger(Retry.class);
    /**
     * When this thread's statements stop being tried again, and the setting that says so; null when no statement runs:
     * set by the outermost {@link #run} or by {@link #until}, so that statements sent inside another's try (a lock
     * confirmed before an insert) or inside a bounded wait (a lock's) share its end instead of adding budgets of
     * their own.
     */
    private static final ThreadLocal<End> END = new ThreadLocal<>();

    /** At {@link Clock#nanos} {@code at}, as {@code setting} says. */
    private record End(long at, String setting) {
    }

    private final Duration budget;
    private final String endpoint;
    private final Clock clock;
    private volatile boolean reached;

    Retry(Duration budget, String endpoint, Clock clock) {
        this.budget = budget;
        this.endpoint = endpoint;
        this.clock = clock;
    }

    /**
     * Runs {@code work} so that no statement in it is tried again after {@code deadline} ({@link Clock#nanos}), which
     * {@code setting} decides, nor after an earlier end this thread already has. A statement under way then still
     * ends by its own timeout.
     */
    static <T> T until(long deadline, String setting, Supplier<T> work) {
        End outer = END.get();
        END.set(outer != null && outer.at() <= deadline ? outer : new End(deadline, setting));
        try {
            return work.get();
        } finally {
            if (outer == null) {
                END.remove();
            } else {
                END.set(outer);
            }
        }
    }

    /**
     * Runs {@code attempt} until it succeeds or fails for good, within the budget from its first try or the end this
     * thread already has ({@link #until}); {@code translate} turns the last failure into ours.
     */
    <T> T run(Attempt<T> attempt, Function<Exception, BridgeException> translate) {
        long start = clock.nanos();
        return until(start + budget.toNanos(), "retry_budget_seconds", () -> tryUntilEnd(attempt, translate, start));
    }

    private <T> T tryUntilEnd(Attempt<T> attempt, Function<Exception, BridgeException> translate, long start) {
        End end = END.get();
        Duration pause = FIRST_PAUSE;
        for (int tries = 1; ; tries++) {
            try {
                T result = attempt.run();
                reached = true;
                return result;
            } catch (Exception e) {
                String reason = transientReason(e);
                Duration left = Duration.ofNanos(end.at() - clock.nanos());
                if (reason == null || !reached && isConnectFailure(e) || left.compareTo(pause) < 0) {
                    BridgeException failure = translate.apply(e);
                    if (reason == null || !reached && isConnectFailure(e)) {
                        throw failure; // not worth another try: no word on tries
                    }
                    throw new BridgeException(failure.code(), failure.getMessage() + " Tried "
                            + (tries == 1 ? "once" : tries + " times") + " in "
                            + (clock.nanos() - start) / 1_000_000_000 + " s (" + end.setting() + ").", e);
                }
                log.warn("A statement to ClickHouse at {} failed ({}); trying again in {} ms, for up to {} s more.",
                        endpoint, reason, pause.toMillis(), left.toSeconds());
                if (!pause(pause)) {
                    throw translate.apply(e);
                }
                pause = pause.multipliedBy(2).compareTo(LONGEST_PAUSE) > 0 ? LONGEST_PAUSE : pause.multipliedBy(2);
            }
        }
    }

    /** Why a failure is worth another try, or null when it is not. */
    static String transientReason(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof UnknownHostException || t instanceof javax.net.ssl.SSLException) {
                return null; // a wrong host name or TLS setting does not heal
            }
            if (t instanceof BridgeException) {
                return null; // ours: already decided
            }
        }
        Integer code = ServerErrors.code(e);
        if (code != null) {
            if (ServerErrors.isKeeperConflict(e)) {
                return null;
            }
            return TRANSIENT_CODES.containsKey(code) ? "code " + code + ", " + TRANSIENT_CODES.get(code) : null;
        }
        ServerErrors.HttpRefusal refusal = ServerErrors.httpRefusal(e);
        if (refusal != null) {
            return refusal.passing() ? "HTTP " + refusal.status() + ": " + refusal.meaning() : null;
        }
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (isConnectFailure(t)) {
                return "cannot connect: " + t.getMessage();
            }
            if (t instanceof SocketTimeoutException || t instanceof SocketException
                    || t.getClass().getSimpleName().equals("NoHttpResponseException")
                    || t.getClass().getSimpleName().equals("ConnectionClosedException")) {
                return "the connection broke: " + t.getMessage();
            }
        }
        return null;
    }

    /** A failure to open a connection (refused, timed out, or a 502/503 of a proxy, which the driver reports so). */
    private static boolean isConnectFailure(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ConnectException || t instanceof ConnectionInitiationException
                    || t instanceof SQLTransientConnectionException) {
                return true;
            }
        }
        return false;
    }

    /** False when interrupted: then no more tries. */
    private boolean pause(Duration pause) {
        try {
            clock.sleep(pause);
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }
}
