#!/usr/bin/env bash
# One of the README's two commands as a new user meets it: a fresh clone, a new $HOME (so the
# compilation, property and data caches start empty; pip's wheel cache is kept), the whole
# command under `/usr/bin/time -v`. Usage:
#
#   benchmarks/fresh_clone.sh ci COMMIT [WORKDIR]          # `bash .ci/run`: install, pytest -q, mypy
#   benchmarks/fresh_clone.sh quickstart COMMIT [WORKDIR]  # the README's first command
#
# WORKDIR (default /tmp/fresh_clone_MODE) gets the clone and the home; WORKDIR/run.log holds
# the load before and after, the command's output, its exit status and time's report.
set -u
MODE=$1
COMMIT=$2
W=${3:-/tmp/fresh_clone_$MODE}
REPO=$(cd "$(dirname "$0")/.." && pwd)
case $MODE in
  ci) COMMAND="bash .ci/run" ;;
  quickstart)  # the first fenced command of the README's quickstart, as written there
    COMMAND=$(awk '/^```bash$/ {getline; print; exit}' "$REPO/README.md") ;;
  *) echo "fresh_clone.sh: MODE must be ci or quickstart, got '$MODE'" >&2; exit 2 ;;
esac
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
mkdir -p "$W" && cd "$W" && rm -rf clone home && mkdir home
git clone -q "$REPO" clone && cd clone && git checkout -q "$COMMIT" || exit 1
export HOME=$W/home
{
  echo "$MODE at $(git rev-parse --short HEAD): $COMMAND"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -v bash -c "$COMMAND"
  echo "rc=$?"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$W/run.log" 2>&1
grep -E "^rc=|passed|Elapsed|User time|Maximum resident" "$W/run.log"
