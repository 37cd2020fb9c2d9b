"""Does `latency_ms` agree with an independent timing of the same model?

Runs a short digits search with `search.latency.measure=on` (or reads a finished study
that timed it: --workdir of an existing one), then for each done candidate exports it as
plain Flax (`nas.export_flax`) and times it in a fresh process: jit, batch 1, 10 warm-up
calls, the median of 200. Prints both medians with their interquartile ranges, their
ratio, and whether they agree within 35 % or within the recorded spread.

    python benchmarks/latency.py --workdir /tmp/latency_bench [--candidates 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TIMER = """
import json, sys, time
import flax.serialization, jax, numpy as np
sys.path.insert(0, sys.argv[1])
from model import INPUT_SHAPE, Model
with open(sys.argv[1] + "/variables.msgpack", "rb") as f:
    variables = jax.device_put(flax.serialization.msgpack_restore(f.read()))
infer = jax.jit(lambda v, x: Model().apply(v, x))
x = jax.device_put(np.zeros((1, *INPUT_SHAPE), np.float32))
for _ in range(10):
    infer(variables, x).block_until_ready()
times = []
for _ in range(200):
    start = time.perf_counter()
    infer(variables, x).block_until_ready()
    times.append((time.perf_counter() - start) * 1e3)
q1, median, q3 = np.percentile(times, [25, 50, 75])
print(json.dumps({"median_ms": float(median), "iqr_ms": float(q3 - q1),
                  "device": str(jax.devices()[0])}))
"""


def search(workdir: str, candidates: int):
    import nas

    overrides = {"train.total_epochs": 0.5, "search.seed_epochs": 1.0,
                 "search.latency.measure": "on", "search.selection.min_acc": 0.0}
    return nas.run_search("cnn", "digits", workdir=workdir, max_candidates=candidates,
                          config=os.path.join(ROOT, "configs", "digits_cnn_search.py"),
                          overrides=overrides, progress=False)


def independent(result, cid: int) -> dict:
    """The exported candidate timed in a fresh process (jit, batch 1, median of 200)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = result.export_flax(os.path.join(tmp, "model"), id=cid)
        run = subprocess.run([sys.executable, "-c", TIMER, str(out)], capture_output=True,
                             text=True, check=True)
    return json.loads(run.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--candidates", type=int, default=5)
    args = parser.parse_args()
    result = search(args.workdir, args.candidates)
    done = [c for c in result.candidates("done") if "latency_ms" in c.metrics]
    print(f"{'id':>3} {'MFLOPs':>7} {'latency_ms [IQR]':>20} {'independent [IQR]':>20} "
          f"{'ratio':>6}  agree")
    agree = 0
    for c in done:
        mine, spread = c.metrics["latency_ms"], c.metrics["latency_ms_iqr"]
        other = independent(result, c.id)
        ratio = mine / other["median_ms"]
        ok = abs(ratio - 1.0) <= 0.35 or abs(mine - other["median_ms"]) <= spread
        agree += ok
        print(f"{c.id:>3} {c.flops / 1e6:>7.1f} {mine:>9.3f} [{spread:>7.3f}] "
              f"{other['median_ms']:>9.3f} [{other['iqr_ms']:>7.3f}] {ratio:>6.2f}  "
              f"{'yes' if ok else 'NO'}")
    print(f"{agree} of {len(done)} agree within 35 % or the recorded spread "
          f"(independent timing on {other['device'] if done else '?'})")


if __name__ == "__main__":
    main()
