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

say "Build the Java bridge"
./mvnw -q -B -ntp package -DskipTests

say "Install Meltano, the local ClickHouse and the ClickHouse state backend into $venv"
install_requirements
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
