"""The README search with its finals, on several search seeds: the search-time pick against
the finals' pick, what the finals cost, and how each pick does on test when trained alike.

    python benchmarks/finals_seeds.py --workdir=/tmp/finals_seeds --seeds 0 1 2 3 4 5

For each seed it runs `configs/digits_cnn_search.py` (finals on, their defaults) in its own
workdir, or reads the study already there. Where the search alone would have picked
another candidate, that architecture also trains once on train plus validation with the
finals' recipe, as the finals' pick and the seed did, so the three are compared on test
trained alike (paired with the seed's take-home model, Tango's interval).
"""

from __future__ import annotations

import argparse
import os
import runpy
import time

from nas.search.execution.driver import Driver
from nas.search.execution.executors import make_executor
from nas.search.execution.finals import Finals
from nas.search.store.finals import run_name
from nas.search.store.finals_table import answer
from nas.search.strategy import paired

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


def train_home(driver: Driver, candidate_id: int) -> None:
    """Trains `candidate_id` as a take-home run (train plus validation, the finals'
    recipe), unless it has one."""
    finals = Finals(driver.study, driver.train, driver.search)
    key = finals.recipe.to_json()
    finals.store.plan([(run_name("home", candidate_id), candidate_id, "home", 0, 0, key)])
    runs = [r for r in finals.store.runs(key, kind="home")
            if r.candidate_id == candidate_id and r.status == "pending"]
    executor = make_executor("inline", workers=1, ray_address=None, hard_timeout_s=0.0)
    for run in runs:
        executor.submit(finals.task(run))
        for outcome in executor.poll(0):
            finals.record(outcome)
    finals.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    args = parser.parse_args()
    print("seed | wall (search+finals) | finals wall | trainings | search pick (FLOPs x) | "
          "finals pick (FLOPs x) | finals vs seed (pt) | test vs seed, trained alike: "
          "search pick | finals pick")
    for seed in args.seeds:
        wall, driver = search(seed, os.path.join(args.workdir, f"seed{seed}"))
        found = answer(driver.study)
        pick, chosen = found.search_pick, found.recommendation
        for c in (pick.candidate, chosen.candidate):
            if c is not None:
                train_home(driver, c.id)
        found = answer(driver.study)
        home = {cid: run.correct for cid, run in found.home.items()}
        seed_c = chosen.seed

        def test_vs_seed(c, home=home, seed_c=seed_c) -> str:
            if c is None or seed_c is None or c.id == seed_c.id:
                return "the seed"
            a, b = home.get(c.id), home.get(seed_c.id)
            return paired.compare(a, b).text() if a is not None and b is not None else "-"

        def ratio(rec) -> str:
            return (f"{rec.candidate.id} ({rec.cost_ratio:.3f})" if rec.cost_ratio is not None
                    else str(rec.candidate.id))

        table = found.table
        versus = chosen.validation.text() if chosen.validation is not None else "the seed"
        print(f"{seed} | {wall:.0f} s | {table.wall_s:.0f} s | {table.trainings} | "
              f"{ratio(pick)} | {ratio(chosen)} | {versus} | {test_vs_seed(pick.candidate)} | "
              f"{test_vs_seed(chosen.candidate)}", flush=True)


if __name__ == "__main__":
    main()
