"""`python -m meltano_state_backend_clickhouse history|restore|runs|check`: a state's versions, going back to one,
the pipeline runs in progress on every runner, and what is wrong with the backend's configuration before a run finds
out.

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
    restore = commands.add_parser("restore", help="write an old version back, as a new one, under the lock")
    restore.add_argument("state_id")
    restore.add_argument("--at", required=True, help="a version from the history, or a time such as "
                                                     "2026-12-04T10:00:00Z (UTC when no offset is given): the "
                                                     "newest version at or before it is restored")
    runs = commands.add_parser("runs", help="the pipeline runs holding a state id now, on every runner")
    checkup = commands.add_parser("check", help="connect and check everything the backend needs; exit 1 on a FAIL")
    for command in (history, restore, runs, checkup):
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
        with _manager(args.environment) as manager:
            if args.command == "history":
                result = manager.history(args.state_id, args.limit)
            elif args.command == "runs":
                result = manager.runs()
            else:
                result = manager.restore(args.state_id, args.at)
    except Error as error:  # ours and Meltano's own (no project here, a bad setting): all say what to do
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.command == "history":
        _print_versions(result) if result else print(f"No history for state id '{args.state_id}'.")
    elif args.command == "runs":
        _print_runs(result)
    else:
        print(f"Restored '{args.state_id}' to its version {result['restored']['version']} of "
              f"{result['restored']['time']}; that is now version {result['now']['version']}.")
    return 0
