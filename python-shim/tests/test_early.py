"""The bridge started while the Meltano CLI starts (early.py): whether it starts, and who adopts it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from meltano_state_backend_clickhouse import early

pytestmark = pytest.mark.python_runtime  # the import hook, the project files, the processes

OURS = "clickhouse://u:p@ch.example:8123/db"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty Meltano project folder as the working directory, with no state backend in the environment."""
    for name in (early.URI_ENV, "MELTANO_PROJECT_ROOT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "meltano.yml").write_text("default_environment: dev\nenvironments:\n- name: dev\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _yml(project, text: str):
    (project / "meltano.yml").write_text(textwrap.dedent(text))


def test_the_environment_decides_first(project, monkeypatch):
    _yml(project, f"state_backend:\n  uri: {OURS}\n")
    monkeypatch.setenv(early.URI_ENV, "s3://bucket/state")
    assert not early.clickhouse_configured()
    monkeypatch.setenv(early.URI_ENV, OURS)
    assert early.clickhouse_configured()


def test_the_project_dotenv_comes_before_meltano_yml(project):
    _yml(project, f"state_backend:\n  uri: {OURS}\n")
    (project / ".env").write_text("MELTANO_STATE_BACKEND_URI=systemdb\n")
    assert not early.clickhouse_configured()
    (project / ".env").write_text(f"OTHER=1\nMELTANO_STATE_BACKEND_URI='{OURS}'\n")
    assert early.clickhouse_configured()


@pytest.mark.parametrize("text", [
    f"state_backend:\n  uri: {OURS}\n",
    f"state_backend.uri: {OURS}\n",
    f"environments:\n- name: prod\n  config:\n    state_backend:\n      uri: {OURS}\n",
    f"env:\n  MELTANO_STATE_BACKEND_URI: {OURS}\n",
    f"environments:\n- name: prod\n  env:\n    MELTANO_STATE_BACKEND_URI: {OURS}\n",
])
def test_meltano_yml_names_clickhouse(project, text):
    _yml(project, text)
    assert early.clickhouse_configured()


def test_clickhouse_elsewhere_in_meltano_yml_is_not_the_state_backend(project):
    _yml(project, f"""\
        plugins:
          loaders:
          - name: target-clickhouse
            config:
              sqlalchemy_url: {OURS}
        state_backend:
          uri: systemdb
        """)
    assert not early.clickhouse_configured()


def test_the_project_is_found_like_meltano_finds_it(project, monkeypatch, tmp_path_factory):
    _yml(project, f"state_backend:\n  uri: {OURS}\n")
    (project / "extract" / "deep").mkdir(parents=True)
    monkeypatch.chdir(project / "extract" / "deep")
    assert early.clickhouse_configured()  # a parent folder's meltano.yml
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert not early.clickhouse_configured()  # no project
    monkeypatch.setenv("MELTANO_PROJECT_ROOT", str(project))
    assert early.clickhouse_configured()


def test_a_broken_meltano_yml_does_not_break_meltanos_start(project, monkeypatch):
    _yml(project, f"state_backend: [uri: {OURS}\n  : :\n")
    with pytest.raises(Exception):
        early.clickhouse_configured()
    import meltano.cli  # noqa: F401  as in the Meltano CLI, where the early start is made

    monkeypatch.setattr(sys, "argv", ["meltano", "state", "list"])
    early.start_if_configured()  # no exception, and no bridge
    assert early.adopt() is None


ADOPTION = textwrap.dedent("""
    import json, sys
    uri, schema, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    if command:  # as the Meltano CLI runs `meltano COMMAND…`
        import meltano.cli
        sys.argv = ["meltano", *command]
    from meltano_state_backend_clickhouse import early, settings  # Meltano's CLI imports settings while it starts
    from meltano_state_backend_clickhouse.backend import ClickhouseStateStoreManager
    early_pid = early._early.pid if early._early else None
    first = ClickhouseStateStoreManager(uri=uri, schema=schema)
    same = ClickhouseStateStoreManager(uri=uri, schema=schema)
    other = ClickhouseStateStoreManager(uri=uri, schema=schema + "_other")
    print(json.dumps([early_pid, *(m._bridge._client.process.pid for m in (first, same, other))]))
""")


def _pids(clickhouse, schema, tmp_path, *command: str) -> list[int | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MELTANO_")}
    env[early.URI_ENV] = clickhouse.state_uri()
    result = subprocess.run([sys.executable, "-c", ADOPTION, clickhouse.state_uri(), schema, *command], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_first_manager_adopts_the_early_bridge_and_another_configuration_starts_its_own(clickhouse, schema,
                                                                                            tmp_path):
    early_pid, first, same, other = _pids(clickhouse, schema, tmp_path, "state", "list")
    assert early_pid is not None and first == same == early_pid and other != early_pid


@pytest.mark.parametrize("command", [(), ("config", "list", "meltano"), ("invoke", "tap-csvlite")],
                         ids=["not the Meltano CLI", "meltano config", "meltano invoke"])
def test_no_early_bridge_outside_the_meltano_cli_or_for_a_command_without_state(clickhouse, schema, tmp_path,
                                                                               command):
    early_pid, first, same, other = _pids(clickhouse, schema, tmp_path, *command)
    assert early_pid is None and first == same != other
