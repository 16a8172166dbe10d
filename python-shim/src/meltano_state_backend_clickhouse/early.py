"""The bridge started while the Meltano CLI starts, for the first manager to adopt (docs/how-it-works.md, "Start-up").

Meltano imports our settings module (a `meltano.settings` entry point) while it reads the project, well before it
builds a state store manager; a JVM started then has done most of its start-up by the time the manager needs it.
It is started without settings, so it holds no connection and no secret until a manager adopts it and sends
`initialize`. One that nobody adopts (`meltano run --help`) is killed at exit; if Meltano itself is killed, it sees
EOF on stdin and exits like every bridge.
"""
from __future__ import annotations

import atexit
import os
import pathlib
import sys
import threading

import yaml
from dotenv import dotenv_values

from .process import BridgeProcess, BridgeStartError, logger

SWITCH_ENV = "CLICKHOUSE_STATE_BRIDGE_EARLY"
# The Meltano commands that use the state backend (`meltano schedule run` too). Any other would never adopt the JVM,
# whose start takes CPU from it (~25 ms of `meltano config list` in one measurement on two cores).
STATE_COMMANDS = frozenset({"run", "el", "elt", "state", "upgrade"})
URI_ENV = "MELTANO_STATE_BACKEND_URI"
_early: BridgeProcess | None = None
_lock = threading.Lock()


def start_if_configured() -> None:
    """Starts the bridge when the Meltano CLI is starting a command that uses state, and our backend looks
    configured."""
    global _early
    if "meltano.cli" not in sys.modules or not STATE_COMMANDS.intersection(sys.argv[1:]):
        return
    if os.environ.get(SWITCH_ENV, "").lower() in ("0", "false", "no", "off"):
        return
    try:
        if not clickhouse_configured():
            return
    except Exception as error:  # never break Meltano's start for a guess: the manager starts its bridge later
        logger.debug("No bridge started early: %r", error)
        return
    try:
        process = BridgeProcess()
    except (BridgeStartError, OSError) as error:
        logger.debug("No bridge started early (%s); the first manager starts one.", error)
        return
    with _lock:
        _early = process
    atexit.register(_kill_unadopted)
    logger.debug("Started the bridge early (pid %s), before Meltano asked for state.", process.pid)


def adopt() -> BridgeProcess | None:
    """The early bridge, once, if it is still running."""
    process = _take()
    if process is None:
        return None
    if process.exit_code() is not None:
        logger.debug("The bridge started early (pid %s) had exited: %s", process.pid, process.describe_exit())
        process.kill()  # reaps it and its pipes
        return None
    logger.debug("Adopted the bridge started early (pid %s).", process.pid)
    return process


def _take() -> BridgeProcess | None:
    global _early
    with _lock:
        process, _early = _early, None
    return process


def _kill_unadopted() -> None:
    process = _take()
    if process is not None:
        process.kill()


def clickhouse_configured() -> bool:
    """Whether the state backend URI names ClickHouse, looked up where Meltano looks first: the environment, the
    project's .env, then meltano.yml (at the top or in any environment). Only a guess about start-up: a wrong one
    costs a JVM that nobody adopts, or the time this module saves. The manager always gets Meltano's own settings."""
    if URI_ENV in os.environ:
        return _is_clickhouse(os.environ[URI_ENV])
    root = _project_root()
    if root is None:
        return False
    dotenv = root / ".env"
    if dotenv.is_file():
        uri = dotenv_values(dotenv).get(URI_ENV)
        if uri is not None:
            return _is_clickhouse(uri)
    text = (root / "meltano.yml").read_bytes()
    if b"clickhouse://" not in text:  # the usual answer, without parsing
        return False
    meltano = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    scopes = [meltano, *(environment.get("config") or {} for environment in meltano.get("environments") or [])]
    uris = [uri for scope in scopes for uri in (
        (scope.get("state_backend") or {}).get("uri"), scope.get("state_backend.uri"))]
    uris += [(scope.get("env") or {}).get(URI_ENV) for scope in [meltano, *(meltano.get("environments") or [])]]
    return any(_is_clickhouse(uri) for uri in uris if isinstance(uri, str))


def _is_clickhouse(uri: str) -> bool:
    return uri.strip().lower().startswith("clickhouse://")


def _project_root() -> pathlib.Path | None:
    """The folder Meltano takes the project from: MELTANO_PROJECT_ROOT, else the nearest with a meltano.yml."""
    given = os.environ.get("MELTANO_PROJECT_ROOT")
    candidates = [pathlib.Path(given)] if given else [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]
    return next((folder for folder in candidates if (folder / "meltano.yml").is_file()), None)
