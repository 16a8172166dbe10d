package io.github.chstate.bridge.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.github.chstate.bridge.clickhouse.ClickHouse;
import io.github.chstate.bridge.clock.Clock;
import io.github.chstate.bridge.config.Settings;
import io.github.chstate.bridge.config.SettingsParser;
import io.github.chstate.bridge.error.BridgeException;
import io.github.chstate.bridge.error.ErrorCode;
import io.github.chstate.bridge.lock.Locks;
import io.github.chstate.bridge.lock.OpenedWhenNeeded;
import io.github.chstate.bridge.lock.Run;
import io.github.chstate.bridge.lock.StateLock;
import io.github.chstate.bridge.store.Checkup;
import io.github.chstate.bridge.store.StateHistory;
import io.github.chstate.bridge.store.StatePart;
import io.github.chstate.bridge.store.StateStore;
import io.github.chstate.bridge.store.StateVersion;
import io.github.chstate.bridge.store.StoredState;
import io.github.chstate.bridge.store.StateSurgery;
import io.github.chstate.bridge.store.Tables;
import io.github.chstate.bridge.store.Versions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** Checks each call's parameters and hands it to the store; holds the connection made by {@code initialize}. */
public final class BridgeService implements BridgeApi, AutoCloseable {
    public static final String BRIDGE_VERSION = "0.1.0";
    private static final Logger log = LoggerFactory.getLogger(BridgeService.class);

    private final ObjectMapper json;
    private Settings settings;
    private Map<String, Object> rawSettings;
    private Map<String, Object> rawRun;
    /** The pipeline run this bridge serves, which leases each state id it touches; null outside a run. */
    private Run run;
    private ClickHouse clickHouse;
    private StateStore store;
    private StateHistory history;
    private StateLock lock;
    private volatile boolean shutdownRequested;
    private final Clock clock;


    public BridgeService(ObjectMapper json) {
        this(json, Clock.SYSTEM);
    }

    /** {@code clock}: the one clock of everything this bridge measures, waits for and schedules. */
    public BridgeService(ObjectMapper json, Clock clock) {
        this.json = json;
        this.clock = clock;
    }

    @Override
    public String ping() {
        return "pong";
    }

    /**
     * Connects with the settings and makes sure the tables are there (one query where they are); the lock is opened by
     * the first call that needs it. A bridge already connected keeps its session until the new one is up: a failed
     * re-initialize (or migrate) leaves it as it was.
     */
    @Override
    public synchronized Map<String, Object> initialize(Map<String, Object> raw, Map<String, Object> runInfo) {
        if (raw == null) {
            throw invalid("initialize needs 'settings', an object of connection settings");
        }
        Settings parsed = SettingsParser.parse(raw);
        Run parsedRun = runInfo == null ? null : run(runInfo);
        ClickHouse ch = new ClickHouse(parsed, clock);
        Tables tables = new Tables(parsed);
        Tables.Found found;
        try {
            found = ch.withinOneBudget(() -> tables.ensure(ch));
        } catch (RuntimeException e) {
            ch.close();
            throw e;
        }
        close();
        settings = parsed;
        rawSettings = raw;
        rawRun = runInfo;
        run = parsed.exclusiveRuns() ? parsedRun : null;
        clickHouse = ch;
        lock = new OpenedWhenNeeded(() -> ch.withinOneBudget(() -> Locks.open(ch, tables.locks(), found.locks(),
                found.deployment().replicated(), parsed)));
        store = new StateStore(ch, tables, found.clock(), lock, found.deployment(), json, parsed.writeInterval());
        history = new StateHistory(ch, tables, found.deployment(), json, lock, store);
        log.debug("Connected to ClickHouse {} with {}", found.serverVersion(), parsed);
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("bridge_version", BRIDGE_VERSION);
        answer.put("protocol_version", PROTOCOL_VERSION);
        answer.put("clickhouse_version", found.serverVersion());
        answer.put("deployment", found.deployment().name().toLowerCase(Locale.ROOT));
        answer.put("lock", lockName(parsed.lock(), found));
        return answer;
    }

    /** The lock this bridge takes, as far as known before its first lock call opens it ("auto": that call decides). */
    private static String lockName(Settings.LockKind asked, Tables.Found found) {
        if (asked == Settings.LockKind.AUTO && !found.locks().keeperLockExists()) {
            return Locks.asksKeeperMap(asked, found.locks(), found.deployment().replicated()) ? "auto" : "claims";
        }
        return asked == Settings.LockKind.CLAIMS ? "claims" : "keeper";
    }

    /** {@link #initialize(Map, Map)} outside a pipeline run. */
    public Map<String, Object> initialize(Map<String, Object> raw) {
        return initialize(raw, null);
    }

    /** Meltano's {@code meltano upgrade}: brings the tables up to date in place, as initialize does, again. */
    @Override
    public synchronized Map<String, Object> migrate() {
        requireInitialized();
        return initialize(rawSettings, rawRun);
    }

    @Override
    public StoredState get(String stateId) {
        return store().get(leased(stateId));
    }

    @Override
    public boolean set(String stateId, StatePart partial, StatePart completed) {
        return store().set(new StoredState(leased(stateId), partial, completed));
    }

    @Override
    public void delete(String stateId) {
        store().delete(required("state_id", stateId));
    }

    @Override
    public List<String> getStateIds(String pattern) {
        return store().stateIds(pattern);
    }

    @Override
    public List<StoredState> getAll(String pattern) {
        return store().getAll(pattern);
    }

    @Override
    public int setAll(List<StoredState> states) {
        if (states == null) {
            throw invalid("set_all needs 'states', a list of {state_id, partial, completed}");
        }
        states.forEach(s -> required("state_id", s == null ? null : s.stateId()));
        return store().setAll(states);
    }

    @Override
    public long clearAll() {
        return store().clearAll();
    }

    @Override
    public List<StateVersion> history(String stateId, Integer limit) {
        if (limit != null && (limit < 1 || limit > 100_000)) {
            throw invalid("limit must be between 1 and 100000, got " + limit);
        }
        return history().history(required("state_id", stateId), limit == null ? 50 : limit);
    }

    @Override
    public StateHistory.Surgery changeStreams(String stateId, String action, List<String> streams, String at,
                                              JsonNode value, Boolean execute, Boolean force) {
        String name = required("action", action);
        if (name.equals("set_bookmark") && (value == null || value.isMissingNode())) {
            throw invalid("set_bookmark needs a value");
        }
        long atMillis = name.equals("restore") ? Versions.parse(required("at", at)) : 0;
        return history().surgery(required("state_id", stateId), new StateHistory.Action(name,
                        streams == null ? List.of() : streams, atMillis, value), Boolean.TRUE.equals(execute),
                Boolean.TRUE.equals(force), settings.lockRetry(), settings.lockWait());
    }

    @Override
    public List<StateSurgery.Change> diff(String stateId, String version) {
        return history().diff(required("state_id", stateId), version == null ? null : Versions.parse(version));
    }

    @Override
    public String acquireLock(String stateId, Double retrySeconds) {
        requireInitialized();
        Duration retry = settings.lockRetry();
        if (retrySeconds != null) {
            if (!(retrySeconds > 0) || retrySeconds > 3600) {
                throw invalid("retry_seconds must be more than 0 and at most 3600, got " + retrySeconds);
            }
            retry = Duration.ofMillis(Math.round(retrySeconds * 1000));
        }
        store.requireWritten(leased(stateId));
        return lock.acquire(stateId, retry, settings.lockWait());
    }

    @Override
    public void releaseLock(String token) {
        requireInitialized();
        lock.release(required("token", token));
    }

    /** Every live run lease: whose it is, since when, when renewed, and when its state was last written. */
    @Override
    public List<Map<String, Object>> runs() {
        requireInitialized();
        List<Map<String, Object>> answer = new ArrayList<>();
        for (StateLock.LiveLease lease : lock.runs()) {
            Run.Holder holder = Run.holder(lease.token());
            if (holder == null) {
                continue;
            }
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("state_id", lease.stateId());
            row.put("host", holder.host());
            row.put("pid", holder.pid());
            row.put("command", holder.command());
            row.put("started", Instant.ofEpochMilli(holder.since()).toString());
            row.put("renewed_seconds_ago", lease.renewedAgo().toMillis() / 1000.0);
            answer.add(row);
        }
        Map<String, String> written = store.lastWritten(answer.stream().map(r -> (String) r.get("state_id")).toList());
        answer.forEach(row -> row.put("last_written", written.get((String) row.get("state_id"))));
        return answer;
    }

    /** Needs no initialize, and leaves the bridge as it was: its own connection, closed at the end. */
    @Override
    public List<Checkup.Line> check(Map<String, Object> raw) {
        if (raw == null) {
            throw invalid("check needs 'settings', an object of connection settings");
        }
        Settings parsed = SettingsParser.parse(raw);
        try (ClickHouse ch = new ClickHouse(parsed, clock)) {
            return Checkup.run(parsed, ch);
        } catch (BridgeException e) {
            return List.of(Checkup.Line.failed(e));
        }
    }

    @Override
    public void flush() {
        store().flush();
    }

    @Override
    public void shutdown() {
        shutdownRequested = true;
    }

    public boolean shutdownRequested() {
        return shutdownRequested;
    }

    /**
     * How long {@link #close} may take: it writes what is pending and frees the locks, each statement tried again
     * within the retry budget, but no bridge outlives its Meltano by much more.
     */
    public synchronized Duration closeDeadline() {
        return Duration.ofSeconds(5).plus(settings == null ? Duration.ZERO : settings.retryBudget());
    }

    /** Writes what is pending and frees the locks, no statement tried again after {@link #closeDeadline}. */
    @Override
    public synchronized void close() {
        if (clickHouse != null) {
            clickHouse.within(closeDeadline(), "the bridge's close deadline, 5 s + retry_budget_seconds", () -> {
                lock.close();
                return null;
            });
            clickHouse.close();
            clickHouse = null;
            store = null;
            history = null;
            lock = null;
        }
    }

    private StateStore store() {
        requireInitialized();
        return store;
    }

    private StateHistory history() {
        requireInitialized();
        return history;
    }

    private synchronized void requireInitialized() {
        if (store == null) {
            throw new BridgeException(ErrorCode.NOT_INITIALIZED, "Call initialize with the connection settings first.");
        }
    }

    /** The state id, leased first when this bridge serves a pipeline run (docs/lock.md, "Run leases"). */
    private String leased(String stateId) {
        required("state_id", stateId);
        Run leaseFor;
        synchronized (this) {
            requireInitialized();
            leaseFor = run;
        }
        if (leaseFor != null) {
            lock.lease(stateId, leaseFor, settings.lockRetry(), settings.lockWait());
        }
        return stateId;
    }

    private static Run run(Map<String, Object> raw) {
        Object id = raw.get("id");
        Object host = raw.get("host");
        Object pid = raw.get("pid");
        Object command = raw.get("command");
        Object force = raw.getOrDefault("force", false);
        if (!(id instanceof String) || !(host instanceof String) || !(pid instanceof Number)
                || !(command instanceof String) || !(force instanceof Boolean)) {
            throw invalid("'run' must be an object of id, host and command (strings), pid (a number) and force "
                    + "(true or false), got " + raw);
        }
        return new Run((String) id, (String) host, ((Number) pid).longValue(), (String) command, (Boolean) force);
    }

    private static String required(String name, String value) {
        if (value == null) {
            throw invalid("'" + name + "' is required and must be a string");
        }
        return value;
    }

    private static BridgeException invalid(String message) {
        return new BridgeException(ErrorCode.INVALID_PARAMS, message);
    }
}
