#!/usr/bin/env bash
# What `import ml_dtypes` costs each Python process that imports jax, by ml_dtypes release:
# one new venv per release, with the numpy of the python3 it runs under (run it in the
# project's venv; pip's cache kept), then ROUNDS imports in each, taking turns, and the
# ratio of their medians. Usage:
#
#   benchmarks/ml_dtypes_import.sh [WORKDIR] [ROUNDS]    # defaults /tmp/ml_dtypes_import, 5
#
# Every worker process, CLI call and exported model's runner imports jax, so this is paid
# once per process; pyproject.toml's bound on ml_dtypes rests on it.
set -eu
W=${1:-/tmp/ml_dtypes_import}
ROUNDS=${2:-5}
RELEASES=(0.6.0 0.7.0)
NUMPY=$(python3 -c "import numpy; print(numpy.__version__)")
SNIPPET='import time, numpy; t = time.perf_counter(); import ml_dtypes; print(time.perf_counter() - t)'
mkdir -p "$W"
for release in "${RELEASES[@]}"; do
  if [ ! -x "$W/$release/bin/python" ]; then
    python3 -m venv "$W/$release"
    "$W/$release/bin/pip" install -q "numpy==$NUMPY" "ml_dtypes==$release"
  fi
  : > "$W/$release.times"
done
for _ in $(seq "$ROUNDS"); do
  for release in "${RELEASES[@]}"; do
    "$W/$release/bin/python" -c "$SNIPPET" >> "$W/$release.times"
  done
done
echo "numpy $NUMPY, $ROUNDS imports of each in turns, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W" "${RELEASES[@]}" <<'PY'
import statistics, sys
folder, releases = sys.argv[1], sys.argv[2:]
medians = {}
for release in releases:
    times = [float(line) for line in open(f"{folder}/{release}.times")]
    medians[release] = statistics.median(times)
    print(f"ml_dtypes {release}: median {medians[release] * 1e3:.1f} ms, "
          f"range {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} ms")
print(f"{releases[1]} / {releases[0]}: {medians[releases[1]] / medians[releases[0]]:.0f}x")
PY
