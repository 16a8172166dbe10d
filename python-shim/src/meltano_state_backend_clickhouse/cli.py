"""`python -m meltano_state_backend_clickhouse history|restore|reset|set-bookmark|runs|check`: a state's versions and
what each changed, going back to one (whole or stream by stream), resetting or setting one stream's bookmark (each
previewed unless --execute), the pipeline runs in progress on every runner, and what is wrong with the backend's
configuration before a run finds out.

The settings are those of the Meltano project in the current folder (meltano.yml, .env, environment variables),
read by Meltano's own settings code, as `meltano state` reads them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from meltano.core.error import Error
from meltano.core.logging import setup_logging
from meltano.core.project import Project
from meltano.core.state_store import state_store_manager_from_project_settings

from . import java as runtime
from .backend import ClickHouseStateBackendError, ClickhouseStateStoreManager
from .client import BridgeError, JsonRpcClient
from .process import BridgeProcess


def _project(environment: str | None) -> Project:
    project = Project.find()
    environment = environment or os.environ.get("MELTANO_ENVIRONMENT") or project.settings.get("default_environment")
    if environment:
        project.activate_environment(environment)
    return project


def _manager(environment: str | None) -> ClickhouseStateStoreManager:
    project = _project(environment)
    manager = state_store_manager_from_project_settings(project.settings)
    if not isinstance(manager, ClickhouseStateStoreManager):
        raise ClickHouseStateBackendError(f"The state backend of the Meltano project in {project.root} is not "
                                          f"ClickHouse ({type(manager).__name__}); set state_backend.uri to "
                                          "clickhouse://…")
    return manager


def _size(n: int) -> str:
    return f"{n} B" if n < 1000 else f"{n / 1000:.1f} kB" if n < 1_000_000 else f"{n / 1_000_000:.1f} MB"


def _print_versions(versions: list[dict]) -> None:
    rows = [("VERSION", "TIME", "SIZE", "KIND", "CHANGED")] + [
        (str(v["version"]), v["time"], _size(v["size"]), "complete" if v["complete"] else "partial",
         ", ".join(v["changed"]) or "-") for v in versions]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])


def _short(bookmark) -> str:
    return "(none)" if bookmark is None else json.dumps(bookmark, sort_keys=True)


def _print_changes(changes: list[dict]) -> None:
    if not changes:
        print("No stream changes.")
    for change in changes:
        print(f"{change['stream']}: {_short(change['before'])} -> {_short(change['after'])}")


def _print_surgery(result: dict) -> None:
    _print_changes(result["changes"])
    if result["executed"]:
        print(f"Written as version {result['version']['version']} of {result['version']['time']}.")
        if result.get("previous"):
            print(f"Undo: python -m meltano_state_backend_clickhouse restore '{result['state_id']}' --at "
                  f"{result['previous']['version']} --execute")
    else:
        print("Preview only: nothing was written. Add --execute to write it.")


def _print_runs(runs: list[dict]) -> None:
    if not runs:
        print("No pipeline run holds a state id.")
        return
    rows = [("STATE ID", "HOST", "PID", "STARTED", "RENEWED", "LAST WRITTEN", "COMMAND")] + [
        (r["state_id"], r["host"], str(r["pid"]), r["started"], f"{r['renewed_seconds_ago']:.1f} s ago",
         r["last_written"] or "-", r["command"]) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[6])


def _bridge_settings(environment: str | None) -> dict:
    """The settings a manager of this project would send the bridge, without making one (which creates the tables)."""
    settings = _project(environment).settings
    uri = settings.get("state_backend.uri") or ""
    if not uri.lower().startswith("clickhouse://"):
        raise ClickHouseStateBackendError(f"The state backend of the Meltano project in {settings.project.root} is not "
                                          "ClickHouse; set state_backend.uri to clickhouse://…")
    given = {}
    for definition in settings.setting_definitions:  # as Meltano collects a manager's keyword arguments
        if definition.name.startswith("state_backend.clickhouse.") or definition.name in (
                "state_backend.lock_timeout_seconds", "state_backend.lock_retry_seconds"):
            given[definition.name.rsplit(".", 1)[1]] = settings.get(definition.name)
    return ClickhouseStateStoreManager.bridge_settings(uri, **given)


def check(settings: dict) -> list[dict]:
    """Each finding: check, status (OK, WARN, FAIL), detail, fix. The Java, the bridge's start, then the bridge's
    own findings (Checkup.java)."""
    try:
        java = runtime.find()
    except runtime.BridgeStartError as error:
        return [{"check": "java", "status": "FAIL", "detail": str(error), "fix": ""}]
    lines = [{"check": "java", "status": "OK", "detail": f"{java.version} at {java.path} (from {java.found_by})",
              "fix": ""}]
    started = time.monotonic()
    process = BridgeProcess()
    try:
        client = JsonRpcClient(process)
        client.call("ping")
        lines.append({"check": "bridge start", "status": "OK", "fix": "",
                      "detail": f"{time.monotonic() - started:.2f} s from start to its first answer"})
        try:
            lines += client.call("check", {"settings": settings})
        except BridgeError as error:  # a setting the bridge refuses
            lines.append({"check": "settings", "status": "FAIL", "detail": str(error), "fix": ""})
    finally:
        process.stop()
    return lines


def _print_check(lines: list[dict]) -> None:
    width = max(len(line["check"]) for line in lines)
    for line in lines:
        print(f"{line['status']:<5} {line['check']:<{width}}  {line['detail']}")
        if line["fix"]:
            print(f"{'':<5} {'':<{width}}  fix: {line['fix']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meltano_state_backend_clickhouse",
                                     description="State history of the Meltano project in this folder.")
    parser.add_argument("--environment", help="the Meltano environment (default: MELTANO_ENVIRONMENT, else the "
                                              "project's default_environment)")
    commands = parser.add_subparsers(dest="command", required=True)
    history = commands.add_parser("history", help="the versions of a state, newest first")
    history.add_argument("state_id")
    history.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    history.add_argument("--diff", nargs="?", const="", metavar="VERSION",
                         help="what a version (default: the newest) changed, stream by stream, against the one before")
    restore = commands.add_parser("restore", help="bring back an old version, whole or only some streams' bookmarks")
    restore.add_argument("state_id")
    restore.add_argument("--at", required=True, help="a version from the history, or a time such as "
                                                     "2026-12-04T10:00:00Z (UTC when no offset is given): the "
                                                     "newest version at or before it is restored")
    reset = commands.add_parser("reset", help="remove streams' bookmarks: they sync from the start on the next run")
    reset.add_argument("state_id")
    bookmark = commands.add_parser("set-bookmark", help="set one stream's replication_key_value, to sync from it")
    bookmark.add_argument("state_id")
    bookmark.add_argument("--value", required=True, help="the new replication_key_value, as JSON (e.g. "
                                                         "'\"2026-01-01T00:00:00Z\"' or 42)")
    for command in (restore, reset, bookmark):
        command.add_argument("--stream", action="append", default=[], required=command is not restore,
                             help="a stream whose bookmark changes (again for more)" + (
                                 "; without it the whole state is restored" if command is restore else ""))
        command.add_argument("--execute", action="store_true", help="write it (default: preview, write nothing)")
        command.add_argument("--force", action="store_true", help="also while a run holds the state id: take it "
                                                                  "over (that run writes no more state)")
    runs = commands.add_parser("runs", help="the pipeline runs holding a state id now, on every runner")
    checkup = commands.add_parser("check", help="connect and check everything the backend needs; exit 1 on a FAIL")
    for command in (history, restore, reset, bookmark, runs, checkup):
        command.add_argument("--json", action="store_true", help="print JSON, for scripts")
    args = parser.parse_args(argv)
    setup_logging(log_level="warning")  # Meltano's logging, to stderr: stdout is the answer
    if args.command == "check":
        try:
            settings = _bridge_settings(args.environment)
        except Error as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        lines = check(settings)  # no line holds the password: the bridge's messages never do
        failed = any(line["status"] == "FAIL" for line in lines)
        print(json.dumps({"ok": not failed, "checks": lines}, indent=2)) if args.json else _print_check(lines)
        return 1 if failed else 0
    try:
        value = json.loads(args.value) if args.command == "set-bookmark" else None
    except ValueError:
        print(f"error: --value must be JSON (a string in quotes: '\"{args.value}\"'), got {args.value}", file=sys.stderr)
        return 1
    try:
        with _manager(args.environment) as manager:
            if args.command == "history" and args.diff is not None:
                result = manager.diff(args.state_id, args.diff or None)
            elif args.command == "history":
                result = manager.history(args.state_id, args.limit)
            elif args.command == "runs":
                result = manager.runs()
            else:
                result = manager.change_streams(args.state_id, args.command.replace("-", "_"), args.stream,
                                                at=getattr(args, "at", None), value=value, execute=args.execute,
                                                force=args.force)
    except Error as error:  # ours and Meltano's own (no project here, a bad setting): all say what to do
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.command == "history" and args.diff is not None:
        _print_changes(result)
    elif args.command == "history":
        _print_versions(result) if result else print(f"No history for state id '{args.state_id}'.")
    elif args.command == "runs":
        _print_runs(result)
    else:
        if result.get("warning"):
            print(f"warning: {result['warning']}", file=sys.stderr)
        _print_surgery(result)
    return 0
