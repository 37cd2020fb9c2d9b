"""Does selection help? Evolution against a random-search baseline at the same budget.

Both arms run the README's digits search (same mutations, same training budget per child,
same seed model); the random arm mutates the seed model every time (no selection). For each
search seed and arm it prints the best accuracy, the smallest FLOPs among candidates at or
above the seed model's accuracy, and the hypervolume of the (accuracy, FLOPs) front relative
to the seed's own (reference point: accuracy 0, twice the seed's FLOPs; the seed alone
scores 1.0), and the CPU time the arm's process used (all its threads: the inline
executor trains in it; with --resume, the time of this run only).

    python benchmarks/search.py --arms --minutes 20 --seeds 0 1 2 [--workdir DIR]
    python benchmarks/search.py --arms --candidates 8 --seeds 0 1 2
    python benchmarks/search.py --arms --candidates 48 --seeds 0 --workdir DIR --resume

A budget in candidates gives the same searches on any machine at any load (the evolution
arm with `--candidates 8` is the README search of that seed); a budget in minutes gives
each arm the same wall time, so how many candidates it trains depends on the machine.
"""

from __future__ import annotations

import os
import runpy
import shutil
import time
from typing import Any

import numpy as np

from nas.search.driver import Driver
from nas.search.pareto import hypervolume

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RandomSearchDriver(Driver):
    """Children of the seed model only: the same mutations without any selection."""

    def choose_parent(self, done: list[Any], rng: np.random.Generator) -> int:
        return min(c.id for c in done if c.parent_id is None)


def run_arm(arm: str, seed: int, minutes: float, workdir: str, candidates: int = 0,
            resume: bool = False) -> Any:
    """Runs one arm for `candidates` candidates (seed model included) or, without a count,
    for `minutes` of wall time (the candidate in training finishes). With `resume`, an
    earlier run's study in `workdir` goes on to `candidates` (the search's choices depend on
    the study and the seed only, so this gives the candidates a fresh run would)."""
    if not resume:
        shutil.rmtree(workdir, ignore_errors=True)
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    config.search.max_candidates = candidates or 10_000
    config.search.executor = "inline"
    config.search.seed = seed
    driver = (RandomSearchDriver if arm == "random" else Driver)(config, workdir)
    if candidates:
        return driver.run(progress=False)
    deadline = time.monotonic() + minutes * 60
    original = driver.record

    def record(outcome):
        original(outcome)
        if time.monotonic() > deadline:
            driver.search.max_candidates = sum(driver.study.counts().values())

    driver.record = record
    return driver.run(progress=False)


def arm_metrics(study: Any) -> dict[str, float]:
    done = study.candidates("done")
    seed = next(c for c in done if c.parent_id is None)
    at_seed = [c.flops for c in done if c.accuracy >= seed.accuracy]
    ref = (0.0, 2.0 * seed.flops)
    points = [(c.accuracy, c.flops) for c in done]
    return {
        "candidates": len(done),
        "best_acc": max(c.accuracy for c in done),
        "seed_acc": seed.accuracy,
        "min_flops_ratio": min(at_seed) / seed.flops,
        "hv_ratio": hypervolume(points, ref) / hypervolume([(seed.accuracy, seed.flops)], ref),
    }


def compare(seeds: list[int], minutes: float, workdir: str, candidates: int = 0,
            resume: bool = False, arms: tuple[str, ...] = ("evolution", "random")) -> None:
    print("| seed | arm | done | CPU min | best acc (seed acc) | min FLOPs >= seed acc / seed | "
          "hypervolume / seed's |")
    print("|---|---|---|---|---|---|---|")
    wins = 0
    for seed in seeds:
        hv = {}
        for arm in arms:
            cpu = time.process_time()
            study = run_arm(arm, seed, minutes, os.path.join(workdir, f"{arm}{seed}"),
                            candidates, resume)
            cpu = (time.process_time() - cpu) / 60
            m = arm_metrics(study)
            hv[arm] = m["hv_ratio"]
            print(f"| {seed} | {arm} | {m['candidates']} | {cpu:.1f} | {m['best_acc']:.4f} "
                  f"({m['seed_acc']:.4f}) | {m['min_flops_ratio']:.3f} | {m['hv_ratio']:.3f} |",
                  flush=True)
        wins += len(hv) == 2 and hv["evolution"] > hv["random"]
    if len(arms) < 2:
        return
    budget = f"{candidates} candidates" if candidates else f"{minutes:g} min"
    print(f"evolution's hypervolume beats random search's in {wins} of {len(seeds)} seeds "
          f"({budget} per arm)")
