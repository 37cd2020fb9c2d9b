"""The README search with its finals, on several search seeds: what the user takes home
against the seed the search trained, on test, and what the finals cost beside the search.

    python benchmarks/finals_seeds.py --workdir=/tmp/finals_seeds --seeds 0 1 2 3 4 5

For each seed it runs `configs/digits_cnn_search.py` (finals on, their defaults) in its own
workdir, or reads the study already there. Per seed: the search's and the finals' wall time
(their ratio: the finals should take no longer), the recommendation's FLOPs against the
seed's, which trained model of it is taken home (the search's weights or the finals'
retrain, chosen on validation), and that model's test accuracy against the search's seed's
(paired, Tango's interval; test is only reported). The SUMMARY line counts the seeds whose
take-home model is within 1 point of the search's seed on test, and those recommending at
most half the seed's FLOPs.
"""

from __future__ import annotations

import argparse
import os
import runpy
import time

from nas.search.execution.driver import Driver
from nas.search.store.finals_table import answer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def search(seed: int, workdir: str) -> tuple[float, Driver]:
    """Runs (or resumes) the README search with `seed`; (wall seconds, its driver)."""
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    config.search.seed = seed
    start = time.perf_counter()
    driver = Driver(config, workdir)
    driver.run(progress=False)
    return time.perf_counter() - start, driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    args = parser.parse_args()
    print("seed | search wall | finals wall (x search) | trainings | recommended (FLOPs x) | "
          "taken home | its test | the search's seed's test | take-home vs seed on test (pt)")
    within = cheap = 0
    for seed in args.seeds:
        wall, driver = search(seed, os.path.join(args.workdir, f"seed{seed}"))
        found = answer(driver.study)
        chosen, kept, table = found.recommendation, found.take_home, found.table
        finals_s = (table.wall_s or 0.0) if table is not None else 0.0
        ratio = chosen.cost_ratio if chosen.cost_ratio is not None else 1.0
        seed_test = chosen.seed.metrics.get("test_accuracy") if chosen.seed else None
        test = kept.metrics.get("test_accuracy") if kept is not None else None
        versus = chosen.test.text() if chosen.test is not None else "the seed's own weights"
        near = test is not None and seed_test is not None and test >= seed_test - 0.01
        within += near
        cheap += ratio <= 0.5
        print(f"{seed} | {wall - finals_s:.0f} s | {finals_s:.0f} s "
              f"({finals_s / max(wall - finals_s, 1e-9):.2f}) | "
              f"{table.trainings if table else 0} | {chosen.candidate.id} ({ratio:.3f}) | "
              f"{kept.source if kept else '-'} | {test} | {seed_test} | {versus}", flush=True)
    print(f"SUMMARY take-home within 1 pt of the search's seed on test: {within} of "
          f"{len(args.seeds)}; recommended at most 0.5x the seed's FLOPs: {cheap} of "
          f"{len(args.seeds)}")


if __name__ == "__main__":
    main()
