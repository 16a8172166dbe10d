#!/usr/bin/env bash
# The demo: builds the bridge, installs everything into .venv, starts the local ClickHouse (chDB), runs an
# incremental Meltano pipeline twice and shows the state stored in ClickHouse. Needs a JDK 17+ and Python 3.10+.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source tests-e2e/setup.sh
work="$(scratch_dir)"
trap 'stop_local_clickhouse "$work"; rm -rf "$work"' EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Build the Java bridge (./mvnw package; the first time ~1 min: it downloads Maven and the dependencies)"
./mvnw -B package -DskipTests | grep -E --line-buffered '^\[INFO\] (--- |BUILD)|^Downloading|ERROR' || true
[ -f target/meltano-clickhouse-bridge.jar ] || { echo "The build failed: run ./mvnw package to see why." >&2; exit 1; }

say "Install Meltano, the local ClickHouse and the ClickHouse state backend into $venv (the first time ~1 min)"
"$venv/bin/python" -V >/dev/null 2>&1 || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -r tests-e2e/requirements.txt \
  -e tests-e2e/chdb-server | grep -E --line-buffered '^(Collecting|Successfully installed)' || true
echo "Installing the shim (python-shim/, with the bridge jar)"
install_shim

say "Start the local ClickHouse"
start_local_clickhouse "$work"
echo "$CLICKHOUSE_URL"
uri="clickhouse://default:@${CLICKHOUSE_URL#*@}/default"

say "Create a Meltano project (tap-csvlite -> target-jsonlite) in $work/project"
project="$work/project"
PYTHONPATH=tests-e2e "$venv/bin/python" -c "
import pathlib, meltano_project
root = meltano_project.create(pathlib.Path('$project'))
meltano_project.write_rows(root, 1, 5)"
export MELTANO_STATE_BACKEND_URI="$uri" MELTANO_SEND_ANONYMOUS_USAGE_STATS=false
meltano() { (cd "$project" && "$venv/bin/meltano" --log-level=warning "$@"); }

say "First run: rows 1-5"
meltano run tap-csvlite target-jsonlite
echo "extracted: $(wc -l < "$project/output.jsonl") rows"
say "State in ClickHouse (meltano state get)"
meltano state get dev:tap-csvlite-to-target-jsonlite; echo

say "Add rows 6-8; second run starts from the bookmark"
PYTHONPATH=tests-e2e "$venv/bin/python" -c "
import pathlib, meltano_project; meltano_project.write_rows(pathlib.Path('$project'), 6, 8)"
before=$(wc -l < "$project/output.jsonl")
meltano run tap-csvlite target-jsonlite
echo "extracted: $(( $(wc -l < "$project/output.jsonl") - before )) new rows"

say "The row in ClickHouse (SELECT … FROM meltano.state FINAL)"
curl -s "${CLICKHOUSE_URL/default:@/}/" --data-binary \
  "SELECT state_id, partial_state, completed_state, updated_at FROM meltano.state FINAL FORMAT Vertical"

say "Done; the local ClickHouse and the demo project are removed now. To try it yourself:"
cat <<EOT
  cd your-meltano-project && export MELTANO_STATE_BACKEND_URI='clickhouse://user:password@host:8123/database'
  $venv/bin/python -m meltano_state_backend_clickhouse check    # what it finds on your ClickHouse, with fixes
  $venv/bin/meltano state list                                  # your pipelines' state ids, kept in ClickHouse
  $venv/bin/meltano run tap-x target-y                          # each STATE message bookmarked in ClickHouse
No ClickHouse at hand? eval "\$(tests-e2e/start-clickhouse.sh /tmp/ch)" starts the local one (CLICKHOUSE_URL),
tests-e2e/stop-clickhouse.sh /tmp/ch stops it.
EOT
