"""Meltano's `clickhouse` state backend: every call is forwarded to the Java bridge."""
from __future__ import annotations

import atexit
import typing as t
from contextlib import contextmanager

from meltano.core.state_store.base import (
    MeltanoState,
    MissingStateBackendSettingsError,
    StateIDLockedError,
    StateStoreManager,
)

from . import client, settings
from .client import BridgeError, SharedBridge

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

# No bridge outlives the interpreter, whether or not Meltano called close().
atexit.register(SharedBridge.stop_all)

# The constructor kwargs Meltano passes for our `state_backend.clickhouse.<key>` settings.
SETTING_KEYS = tuple(definition.name.rsplit(".", 1)[1] for definition in settings.ALL)


class ClickHouseStateBackendError(Exception):
    """A state backend call failed; the message says why and what to do."""


def _translate(error: BridgeError) -> Exception:
    if error.code == client.MISSING_SETTING:
        return MissingStateBackendSettingsError(str(error))
    if error.code == client.LOCK_NOT_ACQUIRED:
        return StateIDLockedError(str(error))
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
        self.settings = {"uri": uri, "lock_timeout_seconds": lock_timeout_seconds,
                         "lock_retry_seconds": lock_retry_seconds,
                         **{k: v for k, v in given.items() if v is not None}}
        try:
            self._bridge: SharedBridge | None = SharedBridge.acquire(self.settings)
        except BridgeError as error:
            raise _translate(error) from None

    def _call(self, method: str, params: dict | None = None) -> t.Any:
        if self._bridge is None:
            raise ClickHouseStateBackendError("This ClickHouse state store manager was closed.")
        try:
            return self._bridge.call(method, params)
        except BridgeError as error:
            raise _translate(error) from None

    def close(self) -> None:
        if self._bridge is not None:
            bridge, self._bridge = self._bridge, None
            bridge.release()

    def migrate(self) -> None:
        """`meltano upgrade` (Meltano 4.2+): brings the tables up to date in place."""
        self._call("migrate")

    def set(self, state: MeltanoState) -> None:
        self._call("set", _from_state(state))

    def get(self, state_id: str) -> MeltanoState | None:
        result = self._call("get", {"state_id": state_id})
        return None if result is None else _to_state(result)

    def delete(self, state_id: str) -> None:
        self._call("delete", {"state_id": state_id})

    def get_state_ids(self, pattern: str | None = None) -> Iterable[str]:
        return self._call("get_state_ids", {"pattern": pattern})

    def get_all(self, pattern: str | None = None) -> Iterator[MeltanoState]:
        return iter([_to_state(r) for r in self._call("get_all", {"pattern": pattern})])

    def set_all(self, states: Iterable[MeltanoState]) -> int:
        return self._call("set_all", {"states": [_from_state(s) for s in states]})

    def clear_all(self) -> int:
        return self._call("clear_all")

    @contextmanager
    def acquire_lock(self, state_id: str, *, retry_seconds: float = 1) -> Iterator[None]:
        token = self._call("acquire_lock", {"state_id": state_id, "retry_seconds": retry_seconds})
        try:
            yield
        finally:
            self._call("release_lock", {"token": token})
