#!/usr/bin/env bash
# The default suite as CI runs it, then three times beside two CPU-bound processes
# (a suite that passes on an idle machine must pass on a busy one). Usage: benchmarks/suite_under_load.sh COMMIT [WORKDIR]
#
# WORKDIR (default /tmp/suite_under_load) gets a fresh clone of this repository at COMMIT
# and a HOME of its own, so the compilation, property and data caches start empty (pip's
# wheel cache is kept). First `.ci/run` (install + `pytest -q`), timed; then three
# consecutive `pytest -q` in that clone, each with two `python3 -c "while True: pass"`
# started before it and ended by PID after it. The 1-minute load average is sampled every
# 30 s into load0.log (CI) .. load3.log; results are in runs.log.
set -u
COMMIT=$1
W=${2:-/tmp/suite_under_load}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
mkdir -p "$W" && cd "$W" && rm -rf clone home && mkdir home
git clone -q "$REPO" clone && cd clone && git checkout -q "$COMMIT"
export HOME=$W/home
sample() { while true; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done; }
loads() { echo "load $(cut -d' ' -f1-3 /proc/loadavg)"; }

sample > "$W/load0.log" & sampler=$!
start=$(date +%s); echo "ci start $(date -u +%T) $(loads)" > "$W/runs.log"
/usr/bin/time -v -o "$W/ci.time" .ci/run > "$W/ci.log" 2>&1; rc=$?
kill $sampler
echo "ci end $(date -u +%T) rc=$rc secs=$(($(date +%s) - start)) $(loads) $(tail -1 "$W/ci.log")" >> "$W/runs.log"

. .venv/bin/activate
for i in 1 2 3; do
  python3 -c "while True: pass" & busy1=$!
  python3 -c "while True: pass" & busy2=$!
  sample > "$W/load$i.log" & sampler=$!
  start=$(date +%s); echo "run $i start $(date -u +%T) $(loads)" >> "$W/runs.log"
  pytest -q > "$W/pytest$i.log" 2>&1; rc=$?
  kill $busy1 $busy2 $sampler
  echo "run $i end $(date -u +%T) rc=$rc secs=$(($(date +%s) - start)) $(loads) $(tail -1 "$W/pytest$i.log")" >> "$W/runs.log"
done
