"""The dashboard overview with its front pictures, at 1,000 to 100,000 finished candidates.

Opens a copy of a study `benchmarks/study_scale.py` built (cached under --cache) read-only,
as `nas-search dashboard` does, and times side by side in one process, per size:
  plain      the overview without pictures (`overview(study, k)`), the baseline;
  cold       the first `overview_json()` of a new Dashboard (every finished row read once);
  finished   `overview_json()` after one more candidate finished (written by a second
             connection, as a worker would): the pictures redrawn;
  unchanged  `overview_json()` after a change that finished nothing (a claim): only the
             tables recomputed, the pictures kept.
Each is the median of --repeats; the ratios are to `plain` of the same size.

    python benchmarks/dashboard_fronts.py --sizes 1000 100000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(n: int, cache: str, repeats: int) -> dict[str, float]:
    from benchmarks.study_scale import VAL_EXAMPLES, cached
    from nas.io import examples
    from nas.search import Study
    from nas.search.reporting.dashboard import Dashboard, overview

    source = cached(n, cache)
    workdir = source + ".dashboard"
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.copytree(source, workdir)
    try:
        reader = Study.load(workdir, read_only=True)
        writer = Study.load(workdir)
        overview(reader, 10)  # the file's pages read once, for every column alike
        out = {"plain": statistics.median(timed(lambda: overview(reader, 10))
                                          for _ in range(repeats))}
        cold, finished, unchanged = [], [], []
        rng = np.random.default_rng(n)
        graph = writer.get(1).graph_json
        for _ in range(repeats):
            board = Dashboard(reader)
            cold.append(timed(board.overview_json))
            cid = writer.add(graph, parent_id=1, fingerprint=f"dash{rng.integers(2**62):x}")
            writer.claim("bench", cid)
            correct = rng.random(VAL_EXAMPLES) < 0.9
            writer.tell(cid, {"accuracy": float(correct.mean()), "flops": 1.0e7,
                              "params": 1.0e5, "val_examples": VAL_EXAMPLES,
                              "val_correct": examples.to_text(correct)})
            finished.append(timed(board.overview_json))
            other = writer.add(graph, parent_id=1, fingerprint=f"dash{rng.integers(2**62):x}")
            writer.claim("bench", other)  # a change that finishes nothing
            unchanged.append(timed(board.overview_json))
            writer.fail(other, "benchmark: not trained")
        out.update(cold=statistics.median(cold), finished=statistics.median(finished),
                   unchanged=statistics.median(unchanged))
        reader.close()
        writer.close()
        return out
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100000])
    parser.add_argument("--cache", default="/tmp/nas_study_scale_v2")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'candidates':>10} {'plain s':>8} {'cold s':>8} {'finished s':>10} "
          f"{'unchanged s':>11}   ratios to plain (cold / finished / unchanged)")
    for n in args.sizes:
        r = measure(n, args.cache, args.repeats)
        print(f"{n:>10,} {r['plain']:>8.3f} {r['cold']:>8.3f} {r['finished']:>10.3f} "
              f"{r['unchanged']:>11.3f}   {r['cold'] / r['plain']:.2f}x / "
              f"{r['finished'] / r['plain']:.2f}x / {r['unchanged'] / r['plain']:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
