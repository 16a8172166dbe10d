"""Starts the Java bridge and forwards its stderr to Python logging."""
from __future__ import annotations

import logging
import os
import pathlib
import shutil
import subprocess
import threading

logger = logging.getLogger("meltano_state_backend_clickhouse.bridge")

JAR_ENV = "CLICKHOUSE_STATE_BRIDGE_JAR"
JAR = pathlib.Path(__file__).parent / "bridge" / "meltano-clickhouse-bridge.jar"
# Only what the JVM needs: never the caller's MELTANO_* variables, which may hold the password.
_ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "JAVA_HOME")
# The JVM's own warnings go to stdout by default, which is the protocol channel: send them to stderr.
_JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Xlog:disable", "-Xlog:all=warning:stderr"]
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "ERROR": logging.ERROR}


class BridgeStartError(RuntimeError):
    """The bridge could not be started: no Java, a Java too old, or no jar."""


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = pathlib.Path(java_home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise BridgeStartError("No Java runtime found: the ClickHouse state backend needs Java 17 or newer. Install a "
                               "JDK/JRE 17+ (e.g. `apt-get install openjdk-17-jre-headless`) and put it on PATH or set "
                               "JAVA_HOME.")
    return found


def find_jar() -> pathlib.Path:
    jar = pathlib.Path(os.environ.get(JAR_ENV) or JAR)
    if not jar.is_file():
        raise BridgeStartError(f"The bridge jar {jar} does not exist. Reinstall meltano-state-backend-clickhouse, or "
                               f"point {JAR_ENV} at a built meltano-clickhouse-bridge.jar.")
    return jar


class BridgeProcess:
    """One running bridge. Its stdin is ours alone: when this process dies, however, the bridge sees EOF and exits."""

    def __init__(self):
        debug = logger.isEnabledFor(logging.DEBUG)
        command = [find_java(), *_JVM_OPTIONS]
        if debug:
            command.append("-Dorg.slf4j.simpleLogger.defaultLogLevel=debug")
        command += ["-jar", str(find_jar())]
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEPT}
        self._popen = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=env, close_fds=True)
        self.stdin = self._popen.stdin
        self.stdout = self._popen.stdout
        self.pid = self._popen.pid
        self._stderr_tail: list[str] = []
        self._stderr_done = threading.Event()
        threading.Thread(target=self._forward_stderr, name=f"clickhouse-bridge-{self.pid}-stderr", daemon=True).start()

    def _forward_stderr(self):
        for raw in self._popen.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if not line:
                continue
            word, _, rest = line.partition(" ")
            if word in _LEVELS:
                logger.log(_LEVELS[word], "%s", rest)
            else:  # stack traces and what the JVM prints itself: for debugging only
                logger.debug("%s", line)
            self._stderr_tail = (self._stderr_tail + [line])[-20:]
        self._stderr_done.set()

    def exit_code(self) -> int | None:
        return self._popen.poll()

    def describe_exit(self) -> str:
        """Why the bridge stopped, as far as its exit code and last stderr lines tell."""
        code = self._popen.wait(timeout=5)
        self._stderr_done.wait(timeout=2)
        tail = "\n".join(self._stderr_tail)
        if "UnsupportedClassVersionError" in tail:
            return ("the Java runtime is too old: the ClickHouse state backend needs Java 17 or newer. Install JDK/JRE "
                    "17+ and put it on PATH or set JAVA_HOME")
        return f"exit code {code}" + (f"; its last output: {self._stderr_tail[-1]}" if self._stderr_tail else "")

    def stop(self, timeout: float = 5.0):
        """Closes stdin (the bridge exits on EOF); kills it if it has not exited in time."""
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
        self.stdout.close()
