"""The README search with its finals, on several search seeds: what the user takes home
against the seed the search trained, on test, and what the finals cost beside the search.

    python benchmarks/finals_seeds.py --workdir=/tmp/finals_seeds --seeds 0 1 2 3 4 5

For each seed it runs `configs/digits_cnn_search.py` in its own workdir (or resumes the
study already there) in two steps: the search with its finals off, then the same study
resumed with the finals at their defaults, which trains the finals alone. Per seed: each
step's wall time and CPU time (this process and its worker processes; CPU time is what a
loaded machine changes least), their ratios (the finals should take no longer than the
search), the recommendation's FLOPs against the
seed's, which trained model of it is taken home (the search's weights or the finals'
retrain, chosen on validation), and that model's test accuracy against the search's seed's
(paired, Tango's interval; test is only reported). The SUMMARY line counts the seeds whose
take-home model is within 1 point of the search's seed on test, and those recommending at
most half the seed's FLOPs.
"""

from __future__ import annotations

import argparse
import os
import resource
import runpy
import time

from nas.search.execution.driver import Driver
from nas.search.store.finals import answer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished worker processes (a driver's
    workers end, and are waited for, when its run ends)."""
    own, workers = (resource.getrusage(who) for who in
                    (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def step(seed: int, workdir: str, finals: bool) -> tuple[float, float, Driver]:
    """Runs (or resumes) the README search with `seed`, its finals off or at their
    defaults; (wall seconds, CPU seconds, its driver)."""
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    config.search.seed = seed
    if not finals:
        config.search.finals.k = 0
    start, cpu = time.perf_counter(), cpu_seconds()
    driver = Driver(config, workdir)
    driver.run(progress=False)
    return time.perf_counter() - start, cpu_seconds() - cpu, driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    args = parser.parse_args()
    print("seed | search wall, CPU | finals wall, CPU (x search) | trainings | "
          "recommended (FLOPs x) | "
          "taken home | its test | the search's seed's test | take-home vs seed on test (pt)")
    within = cheap = 0
    for seed in args.seeds:
        folder = os.path.join(args.workdir, f"seed{seed}")
        search_s, search_cpu, _ = step(seed, folder, finals=False)
        finals_s, finals_cpu, driver = step(seed, folder, finals=True)
        found = answer(driver.study)
        chosen, kept, table = found.recommendation, found.take_home, found.table
        ratio = chosen.cost_ratio if chosen.cost_ratio is not None else 1.0
        seed_test = chosen.seed.metrics.get("test_accuracy") if chosen.seed else None
        test = kept.metrics.get("test_accuracy") if kept is not None else None
        versus = chosen.test.text() if chosen.test is not None else "the seed's own weights"
        near = test is not None and seed_test is not None and test >= seed_test - 0.01
        within += near
        cheap += ratio <= 0.5
        print(f"{seed} | {search_s:.0f} s, {search_cpu:.0f} s | {finals_s:.0f} s "
              f"({finals_s / max(search_s, 1e-9):.2f}), {finals_cpu:.0f} s "
              f"({finals_cpu / max(search_cpu, 1e-9):.2f}) | "
              f"{table.trainings if table else 0} | {chosen.candidate.id} ({ratio:.3f}) | "
              f"{kept.source if kept else '-'} | {test} | {seed_test} | {versus}", flush=True)
    print(f"SUMMARY take-home within 1 pt of the search's seed on test: {within} of "
          f"{len(args.seeds)}; recommended at most 0.5x the seed's FLOPs: {cheap} of "
          f"{len(args.seeds)}")


if __name__ == "__main__":
    main()
