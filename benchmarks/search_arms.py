"""Does selection help? Evolution against a random-search baseline at the same budget.

Both arms run the README's digits search (same mutations, same training budget per child,
same seed model); the random arm mutates the seed model every time (no selection). Every
choice is made on the validation split and reported on the test split (`arm_metrics`). For
each search seed and arm it prints the seed's accuracies, the cheapest child whose
validation accuracy ties the seed's, the cheapest child inside the seed's 95 % test
interval, and the test hypervolume of the validation (accuracy, FLOPs) front relative to
the seed's own (reference point: accuracy 0, twice the seed's FLOPs; the seed alone scores
1.0), and the CPU time the arm's process used (all its threads: the inline
executor trains in it; with --resume, the time of this run only). The finals are off in
every arm: what is compared is what each search found, at the CPU the search spent.

    python benchmarks/search.py --arms --minutes 20 --seeds 0 1 2 [--workdir DIR]
    python benchmarks/search.py --arms --candidates 8 --seeds 0 1 2
    python benchmarks/search.py --arms --candidates 48 --seeds 0 --workdir DIR --resume
    python benchmarks/search.py --arms --candidates 24 --set search.validation_fraction=0.2

A third arm, `--arm evolution random optuna`, is Optuna's NSGA-II over CifarNet's shapes,
each trial trained from scratch with the seed's recipe, on the evolution arm's CPU time of
the same seed (`benchmarks/search_optuna.py`, which says why; `pip install -e '.[bench]'`):

    python benchmarks/search.py --arms --arm evolution random optuna --candidates 24 --seeds 0 1 2

A budget in candidates gives the same searches on any machine at any load (the evolution
arm with `--candidates 8` is the README search of that seed); a budget in minutes gives
each arm the same wall time, so how many candidates it trains depends on the machine.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import runpy
import shutil
import time
from typing import Any

import numpy as np

from nas.search.execution.driver import Driver
from nas.search.reporting.highlights import front_of
from nas.search.strategy.pareto import hypervolume
from nas.search.strategy.recommend import cheapest_matching_seed
from nas.stats import intervals

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


def readme_config(settings: list[str] = ()) -> Any:
    """The README search's config with `settings` (`FIELD=VALUE`, `apply_settings`)."""
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    apply_settings(config, list(settings))
    return config


def run_arm(arm: str, seed: int, minutes: float, workdir: str, candidates: int = 0,
            resume: bool = False, settings: list[str] = ()) -> Any:
    """Runs one arm for `candidates` candidates (seed model included) or, without a count,
    for `minutes` of wall time (the candidate in training finishes). With `resume`, an
    earlier run's study in `workdir` goes on to `candidates` (the search's choices depend on
    the study and the seed only, so this gives the candidates a fresh run would).
    `settings` (`FIELD=VALUE`, `apply_settings`) change the README config first."""
    if not resume:
        shutil.rmtree(workdir, ignore_errors=True)
    config = readme_config(settings)
    config.search.max_candidates = candidates or 10_000
    config.search.executor = "inline"
    config.search.seed = seed
    # The arms compare what the searches found (their validation fronts); the finals would
    # add their trainings to the CPU time the Optuna arm is then given
    config.search.finals.k = 0
    driver = (RandomSearchDriver if arm == "random" else Driver)(config, workdir)
    if candidates:
        return driver.run(progress=False)
    deadline = time.monotonic() + minutes * 60
    original = driver.record

    def record(outcome):
        original(outcome)
        if time.monotonic() > deadline:
            driver.search = dataclasses.replace(
                driver.search, max_candidates=sum(driver.study.counts().values()))

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


def run_timed(arm: str, seed: int, minutes: float, workdir: str, candidates: int,
              resume: bool, settings: list[str], cpu_budget_s: float,
              optuna: dict[str, int]) -> tuple[Any, float]:
    """(study, CPU seconds this process spent on the arm). The optuna arm gets
    `cpu_budget_s` (the evolution arm's CPU time, or `minutes`) unless `optuna["trials"]`
    fixes its count (`search_optuna`)."""
    cpu = time.process_time()
    where = os.path.join(workdir, f"{arm}{seed}")
    if arm == "optuna":
        from search_optuna import run_optuna_arm

        study = run_optuna_arm(readme_config(settings), seed, where, cpu_budget_s,
                               optuna.get("trials", 0), optuna.get("population", 8))
    else:
        study = run_arm(arm, seed, minutes, where, candidates, resume, settings)
    return study, time.process_time() - cpu


def compare(seeds: list[int], minutes: float, workdir: str, candidates: int = 0,
            resume: bool = False, arms: tuple[str, ...] = ("evolution", "random"),
            settings: list[str] = (), optuna: dict[str, int] | None = None) -> None:
    """One row per seed and arm; the optuna arm runs after evolution, on its CPU time."""
    if "optuna" in arms:
        from search_optuna import import_optuna

        import_optuna()  # a missing Optuna fails before any arm trains
        arms = tuple(sorted(arms, key=lambda a: a == "optuna"))
    print("| seed | arm | done | CPU min | seed val / test acc | cheapest val-tied child: FLOPs "
          "/ seed, test acc, inside seed's test interval | min FLOPs / seed of any child "
          "inside the seed's test interval | test hypervolume of the val front / seed's |")
    print("|---|---|---|---|---|---|---|---|")
    ahead = {arm: 0 for arm in arms if arm != "evolution"}
    notes, ahead_of_all = [], 0
    for seed in seeds:
        hv, cpu = {}, {}
        for arm in arms:
            budget = cpu.get("evolution", minutes * 60)
            study, cpu[arm] = run_timed(arm, seed, minutes, workdir, candidates, resume,
                                        settings, budget, optuna or {})
            m = arm_metrics(study)
            hv[arm] = m["hv_ratio"]
            print(f"| {seed} | {arm} | {m['candidates']} | {cpu[arm] / 60:.1f} | "
                  f"{m['seed_val']:.4f} / "
                  f"{m['seed_test']:.4f} | {m['cheapest_ratio']:.3f}, {m['cheapest_test']:.4f}, "
                  f"{'yes' if m['cheapest_ok'] else 'no'} | {m['min_test_ratio']:.3f} | "
                  f"{m['hv_ratio']:.3f} |", flush=True)
            if arm == "optuna":
                limit = ("a count fixed by --optuna-trials" if (optuna or {}).get("trials")
                         else f"a CPU budget of {budget / 60:.1f} min")
                notes.append(f"seed {seed}: optuna ran {study.get_state('optuna_trials')} "
                             f"trials ({m['candidates']} distinct shapes) on {limit}")
        beats = {arm: "evolution" in hv and hv["evolution"] > hv[arm] for arm in ahead}
        for arm, won in beats.items():
            ahead[arm] += won
        ahead_of_all += bool(beats) and all(beats.values())
    for note in notes:
        print(note)
    if "evolution" not in arms or not ahead:
        return
    budget = f"{candidates} candidates" if candidates else f"{minutes:g} min"
    if "optuna" in arms:
        budget += "; optuna: evolution's CPU time"
    for arm, wins in ahead.items():
        print(f"evolution's hypervolume beats {arm}'s in {wins} of {len(seeds)} seeds "
              f"({budget})")
    if len(ahead) > 1:
        print(f"evolution's hypervolume beats all of {', '.join(ahead)} in {ahead_of_all} of "
              f"{len(seeds)} seeds")
