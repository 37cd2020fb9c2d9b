#!/usr/bin/env bash
# The pipelined search's accelerator figures in one call on a lent GPU machine (about 6
# minutes on an H200): the README search with the pipeline off and on, the same search
# pipelined deeper over the host's cores, steps in one program's loop against dispatched
# ones, and the compiler's effort settings. Each part has a time limit, so a slow one leaves the
# others their turn.
# From the project root, with the accelerator wheels and their prelude.sh in .whl/:
#   run(command="source .whl/prelude.sh; bash benchmarks/device.sh", carry=[".whl"])
# Logs land in $OUT (prelude.sh sets it).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export NAS_COMPILATION_CACHE=/tmp/nas_jax_cache  # starts empty: the first run compiles
part() {  # part NAME SECONDS COMMAND...: run one part, its log in $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit} s): $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name: exit $?, $((SECONDS - start)) s"
}
{
  nvidia-smi -L
  nproc
  python3 -c "import jax; print(jax.__version__, jax.devices())"
} 2>&1 | tee "$OUT/machine.log"
part pipeline 250 python3 benchmarks/search.py --time-split 8 --pipeline
deep=(python3 benchmarks/search.py --time-split 24 --executor local
  --set search.pipeline_depth=4 --set search.propose_ahead=3 --set search.prepare_ahead=3)
part deep 130 "${deep[@]}"       # its children new to the cache compile
part deep_warm 90 "${deep[@]}"   # the same candidates from a warm cache
part loops 40 python3 benchmarks/loop_programs.py
part effort 150 python3 benchmarks/compile_effort.py
# The tables only (the logs hold the rest).
for name in pipeline deep deep_warm loops effort; do
  echo "##### $name"
  grep -E '^\||^README|^same|^###|Error|error' "$OUT/$name.log" | grep -v '^|---' | tail -60
done
