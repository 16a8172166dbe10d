package io.github.chstate.bridge.lock;

import java.time.Duration;
import java.util.List;
import java.util.function.Supplier;

/**
 * The lock, opened ({@link Locks#open}: its table found or created, which may take a statement) by the first call
 * that needs it: a command that only reads, such as {@code meltano state get}, sends none of the lock's statements.
 */
public final class OpenedWhenNeeded implements StateLock {
    private final Supplier<StateLock> open;
    private volatile StateLock lock;
    private BeforeFree beforeFree;

    public OpenedWhenNeeded(Supplier<StateLock> open) {
        this.open = open;
    }

    /** The lock, opened now if it was not yet. */
    public synchronized StateLock opened() {
        if (lock == null) {
            StateLock opening = open.get();
            if (beforeFree != null) {
                opening.beforeFree(beforeFree);
            }
            lock = opening;
        }
        return lock;
    }

    @Override
    public String acquire(String stateId, Duration retry, Duration wait) {
        return opened().acquire(stateId, retry, wait);
    }

    @Override
    public void release(String token) {
        opened().release(token);
    }

    @Override
    public void lease(String stateId, Run run, Duration retry, Duration wait) {
        opened().lease(stateId, run, retry, wait);
    }

    /** None before the lock is opened: nothing was granted. */
    @Override
    public String heldToken(String stateId) {
        StateLock current = lock;
        return current == null ? null : current.heldToken(stateId);
    }

    @Override
    public void requireOwn(String token) {
        opened().requireOwn(token);
    }

    @Override
    public void confirmOwn(String token) {
        opened().confirmOwn(token);
    }

    @Override
    public String heldCondition(String token) {
        return opened().heldCondition(token);
    }

    @Override
    public List<LiveLease> runs() {
        return opened().runs();
    }

    @Override
    public synchronized void beforeFree(BeforeFree action) {
        beforeFree = action;
        if (lock != null) {
            lock.beforeFree(action);
        }
    }

    @Override
    public void close() {
        StateLock current = lock;
        if (current != null) {
            current.close();
        }
    }
}
