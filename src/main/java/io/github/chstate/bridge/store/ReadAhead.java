package io.github.chstate.bridge.store;

import io.github.chstate.bridge.clock.Clock;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * Unlocked gets that come in a quick series — `meltano state list` gets every id it listed, one call each (Meltano's
 * StateService.list_state): 100,000 round trips to ClickHouse — are answered from one read of the ids that follow,
 * in the order the ids are listed. Only such a series reads ahead: a get more than {@link #SERIES} after the last one
 * reads its id alone. An answer read ahead is at most {@link #FRESH} old, and never older than a write this bridge made
 * (every write forgets what was read ahead). Gets under a lock never come here.
 */
final class ReadAhead {
    static final int ROWS = 1000;
    static final long BYTES = 4L << 20;
    static final Duration FRESH = Duration.ofSeconds(1);
    static final Duration SERIES = Duration.ofSeconds(1);

    /** What one read ahead found: every state with an id from {@code from} to {@code to} (ClickHouse's order). */
    private record Window(long readAt, byte[] from, byte[] to, Map<String, StoredState> states) {
        boolean covers(byte[] id) {
            return Arrays.compareUnsigned(from, id) <= 0 && Arrays.compareUnsigned(id, to) <= 0;
        }
    }

    private final Clock clock;
    private final Function<String, List<StoredState>> statesFrom;
    private Window window;
    private long lastGetAt = Long.MIN_VALUE;

    /** {@code statesFrom}: the stored states of an id and of those after it, in order, as many as one read takes. */
    ReadAhead(Clock clock, Function<String, List<StoredState>> statesFrom) {
        this.clock = clock;
        this.statesFrom = statesFrom;
    }

    /** The stored state of the id (null: none): read ahead, or by {@code single}, the read of that id alone. */
    synchronized StoredState get(String stateId, Supplier<StoredState> single) {
        long now = clock.nanos();
        boolean series = now - lastGetAt < SERIES.toNanos();
        lastGetAt = now;
        byte[] id = stateId.getBytes(StandardCharsets.UTF_8);
        if (window != null && now - window.readAt < FRESH.toNanos() && window.covers(id)) {
            return window.states.get(stateId);
        }
        if (!series) {
            return single.get();
        }
        List<StoredState> states = statesFrom.apply(stateId);
        Map<String, StoredState> byId = new HashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s));
        byte[] to = states.isEmpty() ? id : states.get(states.size() - 1).stateId().getBytes(StandardCharsets.UTF_8);
        window = new Window(now, id, to, byId);
        return byId.get(stateId);
    }

    /** After a write: nothing read before it is answered. */
    synchronized void forget() {
        window = null;
    }
}
