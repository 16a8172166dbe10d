"""`python -m meltano_state_backend_clickhouse history|restore`: a state's versions, and going back to one.

The settings are those of the Meltano project in the current folder (meltano.yml, .env, environment variables),
read by Meltano's own settings code, as `meltano state` reads them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from meltano.core.error import Error
from meltano.core.logging import setup_logging
from meltano.core.project import Project
from meltano.core.state_store import state_store_manager_from_project_settings

from .backend import ClickHouseStateBackendError, ClickhouseStateStoreManager


def _manager(environment: str | None) -> ClickhouseStateStoreManager:
    project = Project.find()
    environment = environment or os.environ.get("MELTANO_ENVIRONMENT") or project.settings.get("default_environment")
    if environment:
        project.activate_environment(environment)
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
    for command in (history, restore):
        command.add_argument("--json", action="store_true", help="print JSON, for scripts")
    args = parser.parse_args(argv)
    setup_logging(log_level="warning")  # Meltano's logging, to stderr: stdout is the answer
    try:
        with _manager(args.environment) as manager:
            if args.command == "history":
                result = manager.history(args.state_id, args.limit)
            else:
                result = manager.restore(args.state_id, args.at)
    except Error as error:  # ours and Meltano's own (no project here, a bad setting): all say what to do
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.command == "history":
        _print_versions(result) if result else print(f"No history for state id '{args.state_id}'.")
    else:
        print(f"Restored '{args.state_id}' to its version {result['restored']['version']} of "
              f"{result['restored']['time']}; that is now version {result['now']['version']}.")
    return 0
