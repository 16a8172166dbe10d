# Prepares the Python side: .venv with the test requirements, the local ClickHouse server (tests-e2e/chdb-server)
# and the shim. Run it (`tests-e2e/setup.sh`) to make or update .venv; demo.sh, run-all-tests.sh and bench/run.sh
# source it for its functions (they set $repo, the repository root). Sets $venv.
if [ -z "${repo:-}" ]; then repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; fi
venv="${VENV:-$repo/.venv}"

# Creates .venv if missing and installs what the tests, the demo and the benchmark need (not the shim), with uv: pip
# first brings uv (requirements.txt pins it), which installs the rest in seconds where pip takes a minute or more.
install_requirements() {
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" || return 1
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$(grep '^uv==' "$repo/tests-e2e/requirements.txt")" \
    && uv_install "$venv" -r "$repo/tests-e2e/requirements.txt" -e "$repo/tests-e2e/chdb-server"
}

# uv_install ENV ARGS…: `uv pip install ARGS…` into the virtualenv ENV, compiled to bytecode as pip does. (The shim
# itself goes in with pip, as its users install it.)
uv_install() {
  local env="$1"
  shift
  UV_LINK_MODE=copy "$venv/bin/uv" pip install -q --python "$env/bin/python" --compile-bytecode "$@"
}

# Installs the shim from python-shim/ (its build copies target/meltano-clickhouse-bridge.jar, building it if missing).
install_shim() {
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$repo/python-shim"
}

# Starts the local chDB ClickHouse with its data in DIR (options of start-clickhouse.sh after DIR) and exports
# CLICKHOUSE_URL (and CLICKHOUSE_KEEPER_URLS with --keeper); stop all it started with stop_local_clickhouse DIR.
start_local_clickhouse() {
  local dir="$1" output
  shift
  output="$(PYTHON="$venv/bin/python" "$repo/tests-e2e/start-clickhouse.sh" "$@" "$dir")" || return 1
  eval "$output"
  export CLICKHOUSE_URL
  if [ -n "${CLICKHOUSE_KEEPER_URLS:-}" ]; then export CLICKHOUSE_KEEPER_URLS; fi
}

stop_local_clickhouse() {
  "$repo/tests-e2e/stop-clickhouse.sh" "$1"
}

# A scratch folder, on tmpfs where there is one: this VM's disk makes every ClickHouse insert ~10 ms, not ~2.
scratch_dir() {
  mktemp -d -p /dev/shm 2>/dev/null || mktemp -d
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run, not sourced
  set -euo pipefail
  echo "Installing the test requirements and the local ClickHouse server into $venv …"
  install_requirements
  echo "Installing the shim (building the bridge jar with ./mvnw if target/ has none) …"
  install_shim
  echo "Done: $venv"
fi
