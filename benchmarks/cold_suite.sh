#!/usr/bin/env bash
# The default suite from cold under several XLA_FLAGS, one run after the other in the order
# given, in this checkout's .venv. Each run has a $HOME of its own, so the compilation,
# property and data caches start empty (pip's is not used). This machine drifts by 15-20 %
# within an hour: give the settings in turns (A B B A) and compare within each pair.
# tests/conftest.py adds its own flags only where XLA_FLAGS does not set them, so a setting
# may name one of them to ask for XLA's default instead. Usage:
#
#   benchmarks/cold_suite.sh [--workdir DIR] SETTING...
#   e.g. benchmarks/cold_suite.sh "--xla_cpu_use_fusion_emitters=true" "" "" \
#          "--xla_cpu_use_fusion_emitters=true"
#
# DIR (default /tmp/cold_suite) gets home_N and run_N.log (pytest's output, the 30 slowest
# tests and time's report) per run, and summary.log one line per run.
set -u
W=/tmp/cold_suite
if [ "${1:-}" = "--workdir" ]; then W=$2; shift 2; fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" && . .venv/bin/activate || exit 1
mkdir -p "$W" && : > "$W/summary.log"
n=0
for setting in "$@"; do
  n=$((n + 1))
  rm -rf "$W/home_$n" && mkdir "$W/home_$n"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  HOME=$W/home_$n XLA_FLAGS="$setting" /usr/bin/time -v \
    pytest -q -p no:cacheprovider --durations=30 > "$W/run_$n.log" 2>&1
  rc=$?
  echo "run $n [XLA_FLAGS=$setting] rc=$rc load before $load:" \
    "$(grep -E '^[0-9,]+ passed|^=+ .*passed' "$W/run_$n.log" | tail -1)" \
    "$(grep -E 'User time|Elapsed' "$W/run_$n.log" | tr -s ' \t' ' ' | tr '\n' ' ')" \
    >> "$W/summary.log"
  tail -1 "$W/summary.log"
done
