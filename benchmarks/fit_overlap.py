"""Fitting a child's new ops while its steps compile, against fitting first: side by side.

For the children of a finished study (e.g. `python benchmarks/search.py --time-split 4
--workdir /tmp/ts4`), trains each child as its worker would, in alternating order within
each round: `serial` fits the new ops (`nas.train.fit.fit_for_task`) and then trains,
`overlapped` hands the fit to `train_and_eval` as `refit`, which runs it while the train
and eval steps compile (what a worker does now). The persistent compilation cache is off,
so every run compiles its steps and fitting programs as on a fresh machine. Prints each
child's seconds (median over rounds), the ratio, and whether both ways reached the same
accuracy and fit error (they must: the compiled steps depend only on shapes).

    python benchmarks/fit_overlap.py --workdir /tmp/ts4 [--limit 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import time

from nas.graph.serialize import load
from nas.search.execution.task import Task, make_task
from nas.search.execution.worker import train_candidate
from nas.search.store.study import Study
from nas.search.strategy.settings import SearchSettings
from nas.train.fit import fit_for_task

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def serial(task: Task) -> tuple[dict, float]:
    start = time.perf_counter()
    graph, constants = load(task.graph_json)
    variables, fitted = fit_for_task(task.fit, graph, constants, task.init_variables)
    metrics, _ = train_candidate(task.replace(init_variables=variables, fit=None))
    return {**metrics, **fitted}, time.perf_counter() - start


def overlapped(task: Task) -> tuple[dict, float]:
    start = time.perf_counter()
    metrics, _ = train_candidate(task)
    return metrics, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a finished study's workdir")
    parser.add_argument("--config", default=os.path.join(ROOT, "configs",
                                                         "digits_cnn_search.py"))
    parser.add_argument("--limit", type=int, default=3, help="children to time")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    config = runpy.run_path(args.config)["get_config"]()
    config.train.compilation_cache_dir = "none"
    study = Study.load(args.workdir)
    tasks = {}
    search = SearchSettings.from_stored(config)
    for c in study.candidates():
        task = make_task(study, config.train, search, c.id)
        if c.status == "done" and task.fit is not None and len(tasks) < args.limit:
            tasks[c.id] = dict(task, workdir=None, stop_epochs=None)
    if not tasks:
        raise SystemExit(f"{args.workdir}: no finished child with new ops to fit")
    ways = {"serial": serial, "overlapped": overlapped}
    overlapped(next(iter(tasks.values())))  # untimed: loads the data, compiles eager ops
    seconds: dict[tuple[int, str], list[float]] = {}
    results: dict[tuple[int, str], dict] = {}
    for r in range(args.rounds):
        for cid, task in tasks.items():
            for name in (list(ways) if (r + cid) % 2 else list(ways)[::-1]):
                results[cid, name], t = ways[name](task)
                seconds.setdefault((cid, name), []).append(t)
    print(f"seconds per child, median of {args.rounds} rounds (fit + compile + train + eval; "
          "persistent compilation cache off)")
    print("| child | serial s | overlapped s | overlapped / serial | same acc and fit error |")
    print("|---:|---:|---:|---:|---|")
    totals = [0.0, 0.0]
    for cid in tasks:
        a, b = (statistics.median(seconds[cid, n]) for n in ways)
        totals = [totals[0] + a, totals[1] + b]
        same = all(results[cid, "serial"].get(k) == results[cid, "overlapped"].get(k)
                   for k in ("accuracy", "fit_mse_after"))
        print(f"| {cid} | {a:.2f} | {b:.2f} | {b / a:.2f} | {'yes' if same else 'NO'} |")
    print(f"| all | {totals[0]:.2f} | {totals[1]:.2f} | {totals[1] / totals[0]:.2f} | |")


if __name__ == "__main__":
    main()
