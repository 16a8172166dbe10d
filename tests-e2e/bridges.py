"""The bridges that a test's own `meltano` commands started, and no others on the machine.

Each test's commands run the bridge through a recording `java` (CLICKHOUSE_STATE_BRIDGE_JAVA): it is started with a
marker in CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS that names the test's own folder, writes its pid, command line and
environment there, and then becomes the real Java (exec: the same pid). A bridge that lives only milliseconds (an
early one that nobody adopts) is recorded all the same, and another program's bridge never is.
"""
from __future__ import annotations

import contextlib
import pathlib
import shlex
import time

MARKER = "-Dmeltano.clickhouse.tests.bridges="

_RECORDER = """#!/bin/sh
# Records a bridge (a `-jar` start with the marker) in the marker's folder, then runs the real Java.
folder=""
jar=""
for arg; do
  case "$arg" in
    {marker}*) folder="${{arg#{marker}}}" ;;
    -jar) jar=1 ;;
  esac
done
if [ -n "$folder" ] && [ -n "$jar" ]; then
  printf '%s\\0' "$0" "$@" > "$folder/$$.cmdline.tmp"
  env -0 > "$folder/$$.environ.tmp"
  mv "$folder/$$.environ.tmp" "$folder/$$.environ"
  mv "$folder/$$.cmdline.tmp" "$folder/$$.cmdline"
fi
exec {java} "$@"
"""


def write_recorder(folder: pathlib.Path, java: str) -> pathlib.Path:
    """The recording `java`, written once per session (one path, so one class data archive for all tests)."""
    path = folder / "java"
    path.write_text(_RECORDER.format(marker=MARKER, java=shlex.quote(java)))
    path.chmod(0o755)
    return path


class Bridges:
    """The bridges started by commands run with `env`."""

    def __init__(self, recorder: pathlib.Path, folder: pathlib.Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.env = {"CLICKHOUSE_STATE_BRIDGE_JAVA": str(recorder),
                    "CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS": MARKER + str(folder)}

    def started(self) -> dict[int, bytes]:
        """Every bridge started so far: pid → its command line and environment, as it was started."""
        return {int(path.name.split(".")[0]): path.read_bytes() + path.with_suffix(".environ").read_bytes()
                for path in self.folder.glob("*.cmdline")}

    def running(self) -> set[int]:
        """Those still running (a pid used again by another process does not carry our marker)."""
        alive = set()
        for pid in self.started():
            try:
                if (MARKER + str(self.folder)).encode() in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                    alive.add(pid)
            except OSError:
                pass
        return alive

    def left(self, since: set[int], wait_seconds: float = 5) -> set[int]:
        """Bridges started after `since` that still run `wait_seconds` later (Meltano does not wait for its
        bridge's exit)."""
        deadline = time.monotonic() + wait_seconds
        while (left := self.running() - since) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left

    @contextlib.contextmanager
    def watch(self):
        """The bridges started while the block ran: pid → command line and environment."""
        before = set(self.started())
        seen: dict[int, bytes] = {}
        yield seen
        seen.update((pid, record) for pid, record in self.started().items() if pid not in before)

