"""A Meltano project for the end-to-end tests and the demo: tap-csvlite → target-jsonlite, state in ClickHouse."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

PLUGINS = pathlib.Path(__file__).resolve().parent / "plugins"
STATE_ID = "dev:tap-csvlite-to-target-jsonlite"

MELTANO_YML = """\
default_environment: dev
project_id: 00000000-0000-4000-8000-000000000001
send_anonymous_usage_stats: false
venv:
  backend: uv  # every Meltano brings uv; 3.7's default, virtualenv + pip, took ~25 s to install the plugins, uv ~5 s
environments:
- name: dev
plugins:
  extractors:
  - name: tap-csvlite
    namespace: tap_csvlite
    pip_url: {plugins}/tap-csvlite
    executable: tap-csvlite
    capabilities: [catalog, discover, state]
    settings:
    - name: path
    - name: more_path
    - name: state_every
      kind: integer
    - name: record_delay_ms
      kind: integer
    - name: pause_after
      kind: integer
    - name: pause_while
    config:
      path: {root}/rows.csv
  loaders:
  - name: target-jsonlite
    namespace: target_jsonlite
    pip_url: {plugins}/target-jsonlite
    executable: target-jsonlite
    settings:
    - name: path
    config:
      path: {root}/output.jsonl
"""


def meltano_executable() -> str:
    return str(pathlib.Path(sys.executable).parent / "meltano")


def write_rows(root: pathlib.Path, first: int, last: int):
    """Appends rows first..last to rows.csv (creating it with its header)."""
    path = root / "rows.csv"
    new = not path.exists()
    with path.open("a") as f:
        if new:
            f.write("id,name\n")
        for i in range(first, last + 1):
            f.write(f"{i},row {i}\n")


def create(root: pathlib.Path, extra_yml: str = "") -> pathlib.Path:
    """Writes the project (meltano.yml, an empty rows.csv) and installs its two plugins."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "meltano.yml").write_text(MELTANO_YML.format(plugins=PLUGINS, root=root) + extra_yml)
    (root / "rows.csv").write_text("id,name\n")
    env = clean_env()
    subprocess.run([meltano_executable(), "install"], cwd=root, env=env, check=True, capture_output=True, text=True)
    return root


def clean_env(**extra: str) -> dict:
    """The environment without any MELTANO_* of the caller's, and without usage statistics."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MELTANO_")}
    env["MELTANO_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    env.update(extra)
    return env
