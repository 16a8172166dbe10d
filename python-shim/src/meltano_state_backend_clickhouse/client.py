"""JSON-RPC 2.0 over the bridge's stdin/stdout: one request line, one response line, one call at a time."""
from __future__ import annotations

import contextlib
import itertools
import json
import sys
import threading
import typing as t

import orjson

from . import early
from .process import BridgeProcess, logger

# The protocol's error codes (docs/how-it-works.md, "Protocol") that Meltano has exceptions of its own for.
LOCK_NOT_ACQUIRED = -32004
MISSING_SETTING = -32007
RUN_IN_PROGRESS = -32008
# Calls that are sent again to a new bridge when the one answering died: sending one twice leaves the same state.
# acquire_lock too: the new bridge waits for the lock the dead one may have taken until it is stale, as for any holder
# (a run's lease: the same run takes it over). Not release_lock (the lock of a dead bridge goes stale by itself). A call
# about a state id the manager holds the lock on never comes here: it goes to the bridge holding the lock, or fails
# (backend.ClickhouseStateStoreManager._under_lock).
IDEMPOTENT = frozenset({"ping", "initialize", "migrate", "acquire_lock", "get", "set", "delete", "get_state_ids",
                        "get_all", "set_all", "clear_all", "flush"})


def encode(message: dict) -> bytes:
    """The message as one line of JSON. orjson writes a 10 MB state in ~2 ms, json in ~70 ms; what orjson refuses
    (keys that are not strings, integers over 64 bits) is written by json. NaN and infinities, which JSON lacks,
    become null with orjson."""
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError:  # also a state nested deeper than orjson's 255 levels
        with _room_to_nest():
            return json.dumps(message, separators=(",", ":")).encode()


@contextlib.contextmanager
def _room_to_nest():
    """json counts each level of a state as a Python call: a state Meltano itself wrote at ~990 levels must not fail
    here, deeper in the stack (the bridge takes 3,000)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def answer_within(settings: dict) -> float:
    """How long any call may take before the bridge is taken for hung. The bridge bounds its calls: a lock's within
    lock_wait_seconds (a run's lease may then wait lock_timeout_seconds for a displaced run), one call's statements
    within retry_budget_seconds, each statement within connect_timeout_seconds + query_timeout_seconds; 10 s spare.
    A bad value is the bridge's to name: here the default stands in."""
    def seconds(key: str, default: float) -> float:
        try:
            return max(float(settings.get(key) if settings.get(key) is not None else default), 0.0)
        except (TypeError, ValueError):
            return default
    return (seconds("lock_wait_seconds", 30) + seconds("lock_timeout_seconds", 10) + seconds("retry_budget_seconds", 60)
            + 2 * (seconds("connect_timeout_seconds", 10) + seconds("query_timeout_seconds", 30)) + 10)


class BridgeError(Exception):
    """The bridge answered with an error."""

    def __init__(self, code: int, message: str, kind: str = ""):
        super().__init__(message)
        self.code = code
        self.kind = kind


class BridgeDiedError(Exception):
    """The bridge exited before it answered."""


class JsonRpcClient:
    def __init__(self, process: BridgeProcess):
        self.process = process
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.answer_within: float | None = None  # seconds; None: no deadline (until the settings are known)
        # The state ids whose newest state this bridge kept back (to write later) since its last flush.
        self.unflushed: set[str] = set()

    def call(self, method: str, params: dict | None = None) -> t.Any:
        with self._lock:
            request_id = next(self._ids)
            message = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                message["params"] = params
            try:
                self.process.stdin.write(encode(message) + b"\n")
                self.process.stdin.flush()
                line = self.process.read_line(self.answer_within)
            except (BrokenPipeError, ValueError, OSError):
                line = b""
            if line is None:
                self.process.stop(timeout=1)  # stopped or deadlocked: of no more use, and never left running
                raise BridgeDiedError(f"The ClickHouse state bridge (pid {self.process.pid}) did not answer "
                                      f"'{method}' within {self.answer_within:.0f} s (lock_wait_seconds + "
                                      f"lock_timeout_seconds + retry_budget_seconds + 2 × (connect_timeout_seconds + "
                                      f"query_timeout_seconds) + 10 s); it was stopped and nothing was returned for "
                                      f"this call.")
            if not line:
                raise BridgeDiedError(f"The ClickHouse state bridge (pid {self.process.pid}) exited during "
                                      f"'{method}': {self.process.describe_exit()}. Nothing was returned for this call.")
        try:
            with _room_to_nest():
                response = json.loads(line)
        except ValueError:  # e.g. the JVM's own crash report, which it writes to stdout
            self.process.stop(timeout=1)  # the stream is out of step: this bridge is of no more use
            raise BridgeDiedError(f"The ClickHouse state bridge (pid {self.process.pid}) wrote something that is not "
                                  f"JSON-RPC during '{method}': {line[:200]!r}; {self.process.describe_exit()}.") from None
        if response.get("id") is None and "error" in response:
            pass  # the bridge could not read the request (a parse error has no id): report its error below
        elif response.get("id") != request_id:
            raise BridgeDiedError(f"The ClickHouse state bridge answered request {response.get('id')} to request "
                                  f"{request_id}; the protocol stream is out of step.")
        if "error" in response:
            error = response["error"]
            raise BridgeError(error.get("code", 0), error.get("message", "unknown error"),
                              (error.get("data") or {}).get("kind", ""))
        if method == "initialize":
            self.process.initialized = True
        elif method == "flush":
            self.unflushed.clear()
        return response.get("result")


class SharedBridge:
    """The bridge for one connection configuration, shared by every manager with that configuration.

    Meltano opens and closes managers several times in one command (`meltano run` reads the state with one and writes
    it with another, seconds later, or hours later behind a quiet tap), so a bridge nobody uses any more is stopped
    only after LINGER_SECONDS, unless a manager takes it again first, or at interpreter exit. A pipeline run's bridge
    is never stopped before the command ends: it holds the run's leases (docs/lock.md), which live as long as the run.

    A bridge that died may have taken with it states it had accepted and kept back (the write interval): their ids are
    remembered until a later state of the same id is accepted, and flush() fails naming those still unwritten.
    """

    LINGER_SECONDS = 30.0
    _registry: dict[str, SharedBridge] = {}
    _registry_lock = threading.Lock()

    def __init__(self, key: str, settings: dict, run: dict | None):
        self._key = key
        self._settings = settings
        self._run = run
        self._lock = threading.Lock()
        self._client: JsonRpcClient | None = None
        self._linger: threading.Timer | None = None
        self.users = 0
        self._lost: dict[str, int] = {}  # state id -> pid of the bridge that died holding its newest state

    @classmethod
    def acquire(cls, settings: dict, run: dict | None = None) -> SharedBridge:
        """`run`: the pipeline run this process is (backend.pipeline_run), for the bridge's run leases."""
        key = json.dumps([settings, run], sort_keys=True, default=str)
        with cls._registry_lock:
            bridge = cls._registry.get(key)
            if bridge is None:
                bridge = cls._registry[key] = SharedBridge(key, settings, run)
            bridge.users += 1
            bridge._cancel_linger()
        try:
            bridge._ensure_running()
        except BaseException:
            bridge.release()
            raise
        return bridge

    def release(self):
        with self._registry_lock:
            self.users -= 1
            if self.users > 0 or self._run is not None:  # a run's bridge stays until the command ends
                return
            self._linger = threading.Timer(self.LINGER_SECONDS, self._stop_if_unused)
            self._linger.daemon = True
            self._linger.start()

    def _cancel_linger(self):
        """Called with the registry lock held."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def _stop_if_unused(self):
        with self._registry_lock:
            if self.users > 0 or SharedBridge._registry.get(self._key) is not self:
                return
            del SharedBridge._registry[self._key]
        self.stop()

    def call(self, method: str, params: dict | None = None) -> t.Any:
        return self.call_with_client(method, params)[0]

    def call_with_client(self, method: str, params: dict | None = None) -> tuple[t.Any, JsonRpcClient]:
        """The result, and the bridge that answered. A call the bridge died in is sent again to a new bridge if it is
        IDEMPOTENT; otherwise the error says that it was not."""
        client = self._ensure_running()
        try:
            return client.call(method, params), client
        except BridgeDiedError as died:
            if method == "release_lock":  # what the lock guarded is done; the dead bridge's lock goes stale
                logger.warning("%s Its lock goes stale after lock_timeout_seconds.", died)
                return None, client
            if method not in IDEMPOTENT:
                raise BridgeDiedError(f"{died} '{method}' was not sent again: it is not safe to send twice.") from None
            logger.warning("%s Sending '%s' again, to a new bridge.", died, method)
        client = self._ensure_running()
        return client.call(method, params), client

    def still_serves(self, client: JsonRpcClient) -> bool:
        """Whether that bridge is still the running one (it did not die since it answered)."""
        return self._client is client and client.process.exit_code() is None

    def _ensure_running(self) -> JsonRpcClient:
        with self._lock:
            if self._client is not None and self._client.process.exit_code() is None:
                return self._client
            if self._client is not None:
                logger.warning("The ClickHouse state bridge (pid %s) had exited (%s); starting a new one.",
                               self._client.process.pid, self._client.process.describe_exit())
                self._remember_lost(self._client)
                self._client.process.stop(timeout=1)  # its pipes closed now, not when collected (a broken pipe then)
            self._client = JsonRpcClient(early.adopt() or BridgeProcess())
            self._client.answer_within = answer_within(self._settings)
            try:
                self._client.call("initialize", {"settings": self._settings, **({"run": self._run} if self._run else {})})
            except BaseException:
                self._client.process.stop()
                self._client = None
                raise
            return self._client

    def stop(self):
        client = self._take_client()
        if client is None:
            return
        try:
            if client.process.exit_code() is None:
                client.call("shutdown")
        except (BridgeError, BridgeDiedError):
            pass
        client.process.stop()

    def accepted(self, client: JsonRpcClient, state_id: str, *, kept_back: bool):
        """The bridge `client` accepted a state of the id, and kept it back (to write later) or wrote it: a state of
        the id lost with a bridge that died before is superseded either way."""
        if kept_back:
            client.unflushed.add(state_id)
        else:
            client.unflushed.discard(state_id)
        self._lost.pop(state_id, None)

    def _remember_lost(self, dead: JsonRpcClient):
        for state_id in dead.unflushed:
            self._lost[state_id] = dead.process.pid
        dead.unflushed.clear()

    def flush(self):
        """Waits until the bridge has written every state it kept back (docs/how-it-works.md, "Write interval"); raises
        BridgeError naming each state id whose newest state could not be written, and BridgeDiedError naming those a
        bridge that died had accepted (each said once)."""
        client = self._client
        try:
            if client is not None and client.process.exit_code() is None and client.process.initialized:
                client.call("flush")
        except BridgeDiedError:
            pass  # what it kept back is said below
        if client is not None and client.process.exit_code() is not None:
            self._remember_lost(client)
        if self._lost:
            lost, self._lost = self._lost, {}
            pids = ", ".join(str(pid) for pid in sorted(set(lost.values())))
            raise BridgeDiedError(
                f"The ClickHouse state bridge (pid {pids}) died holding the newest state of "
                f"{', '.join(repr(state_id) for state_id in sorted(lost))}, which it had accepted and may not have "
                f"written: the stored bookmark may be an older one. The next run resumes from it and reads again what "
                f"came after.")

    def leave(self):
        """Tells the bridge to exit without waiting for it (BridgeProcess.leave)."""
        client = self._take_client()
        if client is not None:
            client.process.leave()

    def _take_client(self) -> JsonRpcClient | None:
        with self._lock:
            client, self._client = self._client, None
        return client

    @classmethod
    def leave_all(cls) -> list[str]:
        """At interpreter exit: every bridge writes what it kept back, then is told to exit, and is not waited for.
        Returns why states could not be written, if any could not."""
        with cls._registry_lock:
            bridges = list(cls._registry.values())
            cls._registry.clear()
            for bridge in bridges:
                bridge._cancel_linger()
        failures = []
        for bridge in bridges:
            try:
                bridge.flush()
            except (BridgeError, BridgeDiedError) as error:
                failures.append(str(error))
            bridge.leave()
        return failures
