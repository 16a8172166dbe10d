"""Meltano's `clickhouse` state backend: every call is forwarded to the Java bridge."""
from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import typing as t
import uuid
from contextlib import contextmanager

from meltano.core.error import MeltanoError
from meltano.core.state_store.base import (
    MeltanoState,
    MissingStateBackendSettingsError,
    StateIDLockedError,
    StateStoreManager,
)

from . import client, settings
from .client import BridgeDiedError, BridgeError, SharedBridge
from .process import BridgeStartError, logger

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Iterator


def _leave_at_exit():
    """No bridge outlives the interpreter, whether or not Meltano called close(), and the command does not end before
    the last state is stored: if it cannot be, the command says so and exits 1 (an atexit handler can change the exit
    code only by exiting itself)."""
    failures = SharedBridge.leave_all()
    if failures:
        for failure in failures:
            sys.stderr.write(f"ClickHouse state backend: {failure}\n")
        sys.stderr.flush()
        logging.shutdown()
        os._exit(1)


atexit.register(_leave_at_exit)

_FAILURES = (BridgeError, BridgeDiedError, BridgeStartError)

# The constructor kwargs Meltano passes for our `state_backend.clickhouse.<key>` settings.
SETTING_KEYS = tuple(definition.name.rsplit(".", 1)[1] for definition in settings.ALL)
# The Meltano commands that run pipelines: each state id they touch is leased for the whole command (docs/lock.md).
RUN_COMMANDS = frozenset({"run", "el", "elt"})
_RUN_ID = uuid.uuid4().hex  # this process's, so that its next bridge knows a lease left by its earlier one


def pipeline_run() -> dict | None:
    """The pipeline run this Meltano process is, as the bridge's `initialize` takes it; None outside one."""
    import click

    context = click.get_current_context(silent=True)
    if context is None or context.info_name not in RUN_COMMANDS or context.parent is None:
        return None
    return {"id": _RUN_ID, "host": socket.gethostname(), "pid": os.getpid(),
            "command": " ".join(["meltano", *sys.argv[1:]])[:300], "force": bool(context.params.get("force"))}


class ClickHouseStateBackendError(MeltanoError):
    """A state backend call failed; the message says why and what to do. A MeltanoError, so that the Meltano CLI
    prints just the message, without a traceback."""

    def __init__(self, message: str):
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.reason)


class MissingSettingError(MissingStateBackendSettingsError, ClickHouseStateBackendError):
    """Meltano's error for a missing setting, printed as ours."""


class LockedError(StateIDLockedError, ClickHouseStateBackendError):
    """Meltano's error for a state id locked by another process, printed as ours."""


class RunInProgressError(ClickHouseStateBackendError):
    """Another run of the pipeline holds its state id: this one must not start."""


def _translate(error: Exception) -> Exception:
    logger.debug("The ClickHouse state backend failed", exc_info=error)  # `meltano --log-level=debug` shows it
    if isinstance(error, BridgeError) and error.code == client.MISSING_SETTING:
        return MissingSettingError(str(error))
    if isinstance(error, BridgeError) and error.code == client.LOCK_NOT_ACQUIRED:
        return LockedError(str(error))
    if isinstance(error, BridgeError) and error.code == client.RUN_IN_PROGRESS:
        return RunInProgressError(str(error))
    return ClickHouseStateBackendError(str(error))


def _to_state(result: dict) -> MeltanoState:
    return MeltanoState(state_id=result["state_id"], partial_state=result["partial"],
                        completed_state=result["completed"])


def _from_state(state: MeltanoState) -> dict:
    return {"state_id": state.state_id, "partial": state.partial_state or {},
            "completed": state.completed_state or {}}


class ClickhouseStateStoreManager(StateStoreManager):
    """State in ClickHouse, through a long-running Java bridge shared by all managers of one configuration."""

    label: str = "ClickHouse"

    def __init__(self, uri: str, *, lock_timeout_seconds: int = 10, lock_retry_seconds: int = 1,
                 **kwargs: t.Any):
        given = {key: kwargs.pop(key) for key in SETTING_KEYS if key in kwargs}
        super().__init__(**kwargs)
        self.uri = uri
        self.settings = self.bridge_settings(uri, lock_timeout_seconds, lock_retry_seconds, **given)
        self._held: dict[str, object] = {}  # state id -> the bridge that holds its lock for this manager
        try:
            self._bridge: SharedBridge | None = SharedBridge.acquire(self.settings, pipeline_run())
        except _FAILURES as error:
            raise _translate(error) from None

    @staticmethod
    def bridge_settings(uri: str, lock_timeout_seconds: int = 10, lock_retry_seconds: int = 1, **given: t.Any) -> dict:
        """What the bridge's `initialize` gets from Meltano's settings: one of ours that is None is not set."""
        return {"uri": uri, "lock_timeout_seconds": lock_timeout_seconds, "lock_retry_seconds": lock_retry_seconds,
                **{k: v for k, v in given.items() if v is not None}}

    def _call(self, method: str, params: dict | None = None) -> t.Any:
        return self._call_with_bridge(method, params)[0]

    # Meltano 4.2+ has these in StateStoreManager; 3.7 has neither, and `with` must work on every supported Meltano.
    def __enter__(self) -> ClickhouseStateStoreManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Waits for the bridge to write what it kept back (within the retry budget), then lets the bridge go."""
        if self._bridge is not None:
            bridge, self._bridge = self._bridge, None
            try:
                bridge.flush()
            except _FAILURES as error:
                raise _translate(error) from None
            finally:
                bridge.release()

    def migrate(self) -> None:
        """`meltano upgrade` (Meltano 4.2+): brings the tables up to date in place."""
        self._call("migrate")

    def set(self, state: MeltanoState) -> None:
        self._under_lock(state.state_id, "set", _from_state(state))

    def get(self, state_id: str) -> MeltanoState | None:
        result = self._under_lock(state_id, "get", {"state_id": state_id})
        return None if result is None else _to_state(result)

    def delete(self, state_id: str) -> None:
        self._under_lock(state_id, "delete", {"state_id": state_id})

    def _under_lock(self, state_id: str, method: str, params: dict) -> t.Any:
        """A call about a state id this manager holds the lock on goes to the bridge that holds the lock, or fails: a
        new bridge does not hold it, and what Meltano read under the lock may no longer be the newest state there."""
        held = self._held.get(state_id)
        try:
            if held is None:
                result, held = self._call_with_bridge(method, params)
            else:
                result = held.call(method, params)
            if method == "set" and self._bridge is not None:
                self._bridge.accepted(held, state_id, kept_back=result is True)
            return result
        except BridgeDiedError as died:
            raise ClickHouseStateBackendError(
                f"{died} It held the lock on state id '{state_id}': '{method}' was not sent to a new bridge, which does "
                f"not hold it{'; the dead bridge may or may not have done it' if method != 'get' else ''}. Its lock "
                f"goes stale after lock_timeout_seconds ({self.settings['lock_timeout_seconds']} s). Run the command "
                f"again.") from None
        except _FAILURES as error:
            raise _translate(error) from None

    def get_state_ids(self, pattern: str | None = None) -> Iterable[str]:
        return self._call("get_state_ids", {"pattern": pattern})

    def get_all(self, pattern: str | None = None) -> Iterator[MeltanoState]:
        return iter([_to_state(r) for r in self._call("get_all", {"pattern": pattern})])

    def set_all(self, states: Iterable[MeltanoState]) -> int:
        return self._call("set_all", {"states": [_from_state(s) for s in states]})

    def clear_all(self) -> int:
        return self._call("clear_all")

    def history(self, state_id: str, limit: int = 50) -> list[dict]:
        """The newest versions of the state, newest first (docs/history.md)."""
        return self._call("history", {"state_id": state_id, "limit": limit})

    def runs(self) -> list[dict]:
        """Every live run lease, of every runner sharing this ClickHouse (docs/lock.md)."""
        return self._call("runs")

    def change_streams(self, state_id: str, action: str, streams: list[str], *, at: str | None = None,
                       value: t.Any = None, execute: bool = False, force: bool = False) -> dict:
        """reset, restore or set_bookmark of streams' bookmarks: what changes, stream by stream; written as a new
        version only with execute (docs/history.md)."""
        return self._call("change_streams", {"state_id": state_id, "action": action, "streams": streams, "at": at,
                                             "value": value, "execute": execute, "force": force})

    def diff(self, state_id: str, version: str | None = None) -> list[dict]:
        """What a version (default: the newest) changed, stream by stream, against the one before it."""
        return self._call("diff", {"state_id": state_id, "version": version})

    @contextmanager
    def acquire_lock(self, state_id: str, *, retry_seconds: float = 1) -> Iterator[None]:
        token, bridge = self._call_with_bridge("acquire_lock", {"state_id": state_id, "retry_seconds": retry_seconds})
        outer = self._held.get(state_id)
        self._held[state_id] = bridge
        try:
            yield
        finally:
            if outer is None:
                self._held.pop(state_id, None)
            else:
                self._held[state_id] = outer
            if self._bridge is not None and not self._bridge.still_serves(bridge):
                logger.warning("The bridge that took the lock on state id '%s' has died; the lock goes stale after "
                               "lock_timeout_seconds (%s s).", state_id, self.settings["lock_timeout_seconds"])
            else:
                self._call("release_lock", {"token": token})

    def _call_with_bridge(self, method: str, params: dict | None = None) -> tuple[t.Any, object]:
        """The result, and which bridge answered."""
        if self._bridge is None:
            raise ClickHouseStateBackendError("This ClickHouse state store manager was closed.")
        try:
            return self._bridge.call_with_client(method, params)
        except _FAILURES as error:
            raise _translate(error) from None
