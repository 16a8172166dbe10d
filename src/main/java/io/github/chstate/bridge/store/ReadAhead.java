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
 * `meltano state list` lists the ids, then gets each, one call per id (Meltano's StateService.list_state): 100,000 round
 * trips to ClickHouse. Unlocked gets that follow a listing of this bridge, each within {@link #SERIES} of the one
 * before, are answered from one read of the ids that follow, in the order the ids were listed. An answer read ahead is
 * at most {@link #FRESH} old, and never older than a write this bridge made (every write ends the series). Any other
 * get reads its id alone; gets under a lock never come here.
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
    /** A listing started a series of gets, and the last of them (or the listing) was at {@link #lastAt}. */
    private boolean series;
    private long lastAt;

    /** {@code statesFrom}: the stored states of an id and of those after it, in order, as many as one read takes. */
    ReadAhead(Clock clock, Function<String, List<StoredState>> statesFrom) {
        this.clock = clock;
        this.statesFrom = statesFrom;
    }

    /** The stored state of the id (null: none): read ahead, or by {@code single}, the read of that id alone. */
    synchronized StoredState get(String stateId, Supplier<StoredState> single) {
        long now = clock.nanos();
        series = series && now - lastAt < SERIES.toNanos();
        lastAt = now;
        if (!series) {
            window = null;
            return single.get();
        }
        byte[] id = stateId.getBytes(StandardCharsets.UTF_8);
        if (window != null && now - window.readAt < FRESH.toNanos() && window.covers(id)) {
            return window.states.get(stateId);
        }
        List<StoredState> states = statesFrom.apply(stateId);
        Map<String, StoredState> byId = new HashMap<>();
        states.forEach(s -> byId.put(s.stateId(), s));
        byte[] to = states.isEmpty() ? id : states.get(states.size() - 1).stateId().getBytes(StandardCharsets.UTF_8);
        window = new Window(now, id, to, byId);
        return byId.get(stateId);
    }

    /** The ids were listed: gets of them may follow. */
    synchronized void listed() {
        window = null;
        series = true;
        lastAt = clock.nanos();
    }

    /** After a write: nothing read before it is answered, and the series ends. */
    synchronized void forget() {
        window = null;
        series = false;
    }
}
