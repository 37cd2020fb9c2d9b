"""Does selection help? Evolution against a random-search baseline at the same budget.

Both arms run the README's digits search (same mutations, same training budget per child,
same seed model); the random arm mutates the seed model every time (no selection). Every
choice is made on the validation split and reported on the test split (`arm_metrics`). For
each search seed and arm it prints the seed's accuracies, the cheapest child whose
validation accuracy ties the seed's, the cheapest child inside the seed's 95 % test
interval, and the test hypervolume of the validation (accuracy, FLOPs) front relative to
the seed's own (reference point: accuracy 0, twice the seed's FLOPs; the seed alone scores
1.0), and the CPU time the arm's process used (all its threads: the inline
executor trains in it; with --resume, the time of this run only).

    python benchmarks/search.py --arms --minutes 20 --seeds 0 1 2 [--workdir DIR]
    python benchmarks/search.py --arms --candidates 8 --seeds 0 1 2
    python benchmarks/search.py --arms --candidates 48 --seeds 0 --workdir DIR --resume
    python benchmarks/search.py --arms --candidates 24 --set search.validation_fraction=0.2

A budget in candidates gives the same searches on any machine at any load (the evolution
arm with `--candidates 8` is the README search of that seed); a budget in minutes gives
each arm the same wall time, so how many candidates it trains depends on the machine.
"""

from __future__ import annotations

import ast
import os
import runpy
import shutil
import time
from typing import Any

import numpy as np

from nas.search.execution.driver import Driver
from nas.search.reporting.report import cheapest_matching_seed, front_of
from nas.search.strategy import intervals
from nas.search.strategy.pareto import hypervolume

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RandomSearchDriver(Driver):
    """Children of the seed model only: the same mutations without any selection."""

    def choose_parent(self, done: list[Any], rng: np.random.Generator) -> int:
        return min(c.id for c in done if c.parent_id is None)


def apply_settings(config: Any, settings: list[str]) -> None:
    """Sets `FIELD=VALUE` pairs (`search.validation_fraction=0.2`) on `config`; a value is
    read with `ast.literal_eval`, or kept as a string where that fails. A field the config
    does not have is refused (a ConfigDict would add it silently)."""
    for setting in settings:
        field, sep, text = setting.partition("=")
        if not sep:
            raise ValueError(f"--set {setting!r}: expected FIELD=VALUE")
        field = field.strip()
        *path, name = field.split(".")
        node = config
        for part in path:
            node = node[part] if hasattr(node, "keys") and part in node else None
        if not hasattr(node, "keys") or name not in node:
            raise ValueError(f"--set: unknown config field {field!r}")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        node[name] = value


def run_arm(arm: str, seed: int, minutes: float, workdir: str, candidates: int = 0,
            resume: bool = False, settings: list[str] = ()) -> Any:
    """Runs one arm for `candidates` candidates (seed model included) or, without a count,
    for `minutes` of wall time (the candidate in training finishes). With `resume`, an
    earlier run's study in `workdir` goes on to `candidates` (the search's choices depend on
    the study and the seed only, so this gives the candidates a fresh run would).
    `settings` (`FIELD=VALUE`, `apply_settings`) change the README config first."""
    if not resume:
        shutil.rmtree(workdir, ignore_errors=True)
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    apply_settings(config, list(settings))
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


def _test(c: Any) -> tuple[float, int]:
    return c.extra_metrics["test_accuracy"], int(c.extra_metrics["test_examples"])


def arm_metrics(study: Any) -> dict[str, float]:
    """Decided on validation, reported on test: the front is the validation front, its
    hypervolume is computed from its members' test accuracies; "cheapest" is the summary's
    (`cheapest_matching_seed`: fewest FLOPs with a validation accuracy tied with the seed's
    or above), and whether its test accuracy is inside the seed's test interval (or above)
    is reported next to it."""
    done = study.candidates("done")
    seed = next(c for c in done if c.parent_id is None)
    children = [c for c in done if c.parent_id is not None]
    cheapest = cheapest_matching_seed(done, seed)
    seed_low = intervals.wilson(*_test(seed))[0]
    front = front_of(done, "flops")
    ref = (0.0, 2.0 * seed.flops)
    test_hv = hypervolume([(_test(c)[0], c.flops) for c in front], ref)
    # the test-set check of the criterion: any child within the seed's test interval
    on_test = [c.flops for c in children if _test(c)[0] >= seed_low]
    return {
        "candidates": len(done),
        "seed_val": seed.accuracy,
        "seed_test": _test(seed)[0],
        "cheapest_ratio": cheapest.flops / seed.flops if cheapest else float("nan"),
        "cheapest_test": _test(cheapest)[0] if cheapest else float("nan"),
        "cheapest_ok": bool(cheapest and _test(cheapest)[0] >= seed_low),
        "min_test_ratio": min(on_test) / seed.flops if on_test else float("nan"),
        "hv_ratio": test_hv / hypervolume([(_test(seed)[0], seed.flops)], ref),
    }


def compare(seeds: list[int], minutes: float, workdir: str, candidates: int = 0,
            resume: bool = False, arms: tuple[str, ...] = ("evolution", "random"),
            settings: list[str] = ()) -> None:
    print("| seed | arm | done | CPU min | seed val / test acc | cheapest val-tied child: FLOPs "
          "/ seed, test acc, inside seed's test interval | min FLOPs / seed of any child "
          "inside the seed's test interval | test hypervolume of the val front / seed's |")
    print("|---|---|---|---|---|---|---|---|")
    wins = 0
    for seed in seeds:
        hv = {}
        for arm in arms:
            cpu = time.process_time()
            study = run_arm(arm, seed, minutes, os.path.join(workdir, f"{arm}{seed}"),
                            candidates, resume, settings)
            cpu = (time.process_time() - cpu) / 60
            m = arm_metrics(study)
            hv[arm] = m["hv_ratio"]
            print(f"| {seed} | {arm} | {m['candidates']} | {cpu:.1f} | {m['seed_val']:.4f} / "
                  f"{m['seed_test']:.4f} | {m['cheapest_ratio']:.3f}, {m['cheapest_test']:.4f}, "
                  f"{'yes' if m['cheapest_ok'] else 'no'} | {m['min_test_ratio']:.3f} | "
                  f"{m['hv_ratio']:.3f} |", flush=True)
        wins += len(hv) == 2 and hv["evolution"] > hv["random"]
    if len(arms) < 2:
        return
    budget = f"{candidates} candidates" if candidates else f"{minutes:g} min"
    print(f"evolution's hypervolume beats random search's in {wins} of {len(seeds)} seeds "
          f"({budget} per arm)")
