"""How the search's bookkeeping scales with the study: 1,000 to 100,000 finished candidates.

Builds studies of N finished candidates through the public `Study` API (no training: zoo
graphs with varied, seeded metrics and per-example validation results, each child's
parent drawn from those before it) and
prints, side by side per N: the driver's bookkeeping for one proposal (everything the
loop does for a proposal except mutation, fitting and training: counts, progress line,
the population read, parent selection, the parent's row, the duplicate check, the size
check and the child's row), a worker's claim + result, the summary, the report, the
study file's size, and a rerun of the finished search (`nas-search` on the workdir,
start-up to exit, in a fresh process).

    python benchmarks/study_scale.py                       # 1,000 10,000 100,000
    python benchmarks/study_scale.py --sizes 1000 10000 --report-timeout 120

Built studies are cached under --cache (default /tmp/nas_study_scale_v2/N; 100,000 takes
minutes to build) and measured on a copy, so the cache stays as built. Timings are
medians of --repeats proposals (the first proposal of a driver, which reads the
population once, is reported apart as "first proposal"). The sizes' drivers take turns
proposal by proposal, so "per proposal / smallest" compares them under the same load.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "digits_cnn_search.py")
COMPLETE = "complete"
VAL_EXAMPLES = 143  # the README search's validation split


def search_config(n: int) -> Any:
    """The README search's config, asking for `n` candidates (what the study stores)."""
    config = runpy.run_path(CONFIG)["get_config"]()
    config.search.max_candidates = n
    return config


def zoo_graphs() -> list[str]:
    """A few real architectures' graph JSON (CifarNet and variants of its width)."""
    from nas.graph.serialize import graph_to_json
    from nas.zoo import cnn

    graph, constants, _ = cnn.CifarNet()
    return [graph_to_json(graph, constants)]


def build(n: int, workdir: str) -> None:
    """A study of `n` done candidates in `workdir` (written to a temporary folder first,
    so an interrupted build leaves no cache behind)."""
    from nas.io import examples
    from nas.search import Study

    tmp = workdir + ".building"
    shutil.rmtree(tmp, ignore_errors=True)
    config = search_config(n)
    study = Study.create(tmp, config=config.to_dict())
    graphs = zoo_graphs()
    rng = np.random.default_rng(n)
    seed_flops, seed_params = 1.52e7, 1.2e5
    # Per-example validation results as a search stores them: candidates of one search
    # agree on most images (an image's difficulty is shared), so paired ties apply.
    difficulty = rng.random(VAL_EXAMPLES)
    start = time.monotonic()
    for i in range(1, n + 1):
        parent = None if i == 1 else int(rng.integers(1, i))
        cid = study.add(graphs[i % len(graphs)], parent_id=parent, fingerprint=f"{i:016x}",
                        seed=i, inheritance={"kind": "subgraph", "new": ["conv_1"]},
                        state={"proposals": i - 1})
        scale = 1.0 if i == 1 else float(rng.lognormal(0.0, 0.5))
        accuracy = 0.9 if i == 1 else float(np.clip(rng.normal(0.85, 0.06), 0.3, 0.99))
        correct = difficulty < accuracy + rng.normal(0.0, 0.05, VAL_EXAMPLES)
        study.tell(cid, {"accuracy": float(correct.mean()), "loss": 0.4,
                         "val_correct": examples.to_text(correct),
                         "flops": seed_flops * scale, "params": seed_params * scale,
                         "epochs": 2.0, "val_examples": VAL_EXAMPLES, "test_accuracy": accuracy,
                         "test_examples": 360, "im_sec_core_train": 300.0 / scale,
                         "im_sec_core_infer": 900.0 / scale})
        if i % 10000 == 0:
            print(f"  built {i:,}/{n:,} ({time.monotonic() - start:.0f} s)", flush=True)
    study.close()
    os.replace(tmp, workdir)
    open(os.path.join(workdir, COMPLETE), "w").close()


def cached(n: int, cache: str) -> str:
    workdir = os.path.join(cache, str(n))
    if not os.path.exists(os.path.join(workdir, COMPLETE)):
        print(f"building a study of {n:,} candidates in {workdir} ...", flush=True)
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(cache, exist_ok=True)
        start = time.monotonic()
        build(n, workdir)
        print(f"  built in {time.monotonic() - start:.0f} s", flush=True)
    from nas.search import Study

    Study.load(workdir).close()  # what opening adds to an older file, added once here
    return workdir


def one_proposal(driver: Any, bar: Any, graph_json: str, fingerprint: str) -> int:
    """The loop's bookkeeping for one proposal, the child standing in for a mutation."""
    study = driver.study
    counts = study.counts()
    driver._update(bar, study.finished_count(counts), counts)
    study.counts()  # the loop reads the counts again before it proposes
    done = driver.population()
    k = int(study.get_state("proposals", 0))
    rng = np.random.default_rng([driver.search.seed, k])
    parent = study.get(driver.choose_parent(done, rng))
    study.find(fingerprint)
    next((c for c in done if c.parent_id is None and c.params), None)  # check_size's seed
    return study.add(graph_json, parent_id=parent.id, fingerprint=fingerprint,
                     seed=int(rng.integers(2**31 - 1)), state={"proposals": k + 1})


def measure_drivers(workdirs: dict[int, str], repeats: int) -> dict[int, dict[str, float]]:
    """Per proposal and claim + result, for every size at once: the drivers take turns,
    proposal by proposal, so each size sees the same machine load and their ratio holds on
    a shared machine whose speed drifts."""
    from tqdm import tqdm

    from nas.search.execution.driver import Driver

    graph_json = zoo_graphs()[0]
    out: dict[int, dict[str, float]] = {}
    drivers = {}
    for n, workdir in workdirs.items():
        start = time.perf_counter()
        drivers[n] = Driver(search_config(n + 10 * repeats), workdir)
        out[n] = {"driver start": time.perf_counter() - start}
    bar = tqdm(total=1, disable=True)
    proposals: dict[int, list[float]] = {n: [] for n in drivers}
    results: dict[int, list[float]] = {n: [] for n in drivers}
    for r in range(repeats + 1):
        for n, driver in drivers.items():
            start = time.perf_counter()
            cid = one_proposal(driver, bar, graph_json, f"scale-{r:012x}")
            proposals[n].append(time.perf_counter() - start)
            start = time.perf_counter()
            claimed = driver.study.claim(worker="bench:1")
            driver.study.tell(claimed.id, {"accuracy": 0.8, "flops": 1e7, "params": 1e5,
                                           "val_examples": 143}, worker="bench:1")
            results[n].append(time.perf_counter() - start)
            assert claimed.id == cid
    smallest = statistics.median(proposals[min(drivers)][1:])
    for n, driver in drivers.items():
        out[n]["first proposal"] = proposals[n][0]
        out[n]["per proposal"] = statistics.median(proposals[n][1:])
        out[n]["per proposal, best"] = min(proposals[n][1:])  # the least disturbed
        out[n]["per proposal / smallest"] = out[n]["per proposal"] / smallest
        out[n]["claim + result"] = statistics.median(results[n][1:])
        out[n]["claim + result, best"] = min(results[n][1:])
        driver.study.close()
    return out


def timed_subprocess(argv: list[str], timeout: float) -> float | None:
    start = time.perf_counter()
    try:
        subprocess.run(argv, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


PARTS = ("summary", "report", "rerun", "driver", "finished-check")


def measure(n: int, cache: str, timeout: float, parts: tuple[str, ...]) -> dict[str, Any]:
    """The figures of one study size. The report is written before the rerun, as the
    search that finished wrote it, so the rerun finds it (and says where it is)."""
    from nas.search import Study
    from nas.search.reporting.report_text import summary

    source = cached(n, cache)
    workdir = source + ".measure"
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.copytree(source, workdir)
    out: dict[str, Any] = {"study file MB": os.path.getsize(
        os.path.join(source, "study.db")) / 2**20}
    exe = os.path.dirname(sys.executable)
    if "summary" in parts:
        study = Study.load(workdir)
        start = time.perf_counter()
        summary(study)
        out["summary"] = time.perf_counter() - start
        study.close()
    if "report" in parts:
        out["report"] = timed_subprocess(
            [os.path.join(exe, "nas-search"), "report", f"--workdir={workdir}"], timeout)
        html = os.path.join(workdir, "report", "report.html")
        if os.path.exists(html):
            out["report MB"] = os.path.getsize(html) / 2**20
    if "rerun" in parts:
        out["rerun finished"] = timed_subprocess(
            [os.path.join(exe, "nas-search"), f"--config={CONFIG}",
             f"--config.search.max_candidates={n}", f"--workdir={workdir}", "--noprogress"],
            timeout)
    if "finished-check" in parts:  # the rerun's reads of the study, without its imports
        from nas.search.reporting import report_state

        start = time.perf_counter()
        study = Study.load(workdir)
        study.counts()
        report_state.is_current(study)
        out["finished check"] = time.perf_counter() - start
        study.close()
    shutil.rmtree(workdir, ignore_errors=True)
    return out


def copies(sizes: list[int], cache: str) -> dict[int, str]:
    """A fresh copy of each size's cached study, for the drivers to add to."""
    out = {}
    for n in sizes:
        source = cached(n, cache)
        out[n] = source + ".drive"
        shutil.rmtree(out[n], ignore_errors=True)
        shutil.copytree(source, out[n])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--cache", default="/tmp/nas_study_scale_v2")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--report-timeout", type=float, default=900.0,
                        help="seconds before the report or the rerun is given up on")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="what to measure (driver: per proposal, claim + result)")
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    if args.build_only:
        for n in args.sizes:
            cached(n, args.cache)
        return
    results = {}
    for n in args.sizes:
        results[n] = measure(n, args.cache, args.report_timeout, tuple(args.parts))
        print(f"{n}: {results[n]}", flush=True)
    if "driver" in args.parts:
        workdirs = copies(args.sizes, args.cache)
        for n, figures in measure_drivers(workdirs, args.repeats).items():
            results[n].update(figures)
            print(f"{n}: {figures}", flush=True)
        for workdir in workdirs.values():
            shutil.rmtree(workdir, ignore_errors=True)
    rows = ["per proposal", "per proposal / smallest", "per proposal, best",
            "first proposal", "claim + result",
            "claim + result, best", "driver start", "summary",
            "report", "report MB", "rerun finished", "finished check", "study file MB"]
    print(f"{'candidates':<24}" + "".join(f"{n:>14,}" for n in args.sizes))
    for row in rows:
        cells = []
        for n in args.sizes:
            value = results[n].get(row, "-")
            if value == "-":
                cells.append(f"{'-':>14}")
            elif value is None:
                cells.append(f"{'> ' + format(args.report_timeout, 'g') + ' s':>14}")
            elif row.endswith("smallest"):
                cells.append(f"{value:>13.2f}x")
            elif row.endswith("MB"):
                cells.append(f"{value:>14.1f}")
            elif value < 1.0:
                cells.append(f"{value * 1e3:>11.2f} ms")
            else:
                cells.append(f"{value:>12.2f} s")
        print(f"{row:<24}" + "".join(cells))


if __name__ == "__main__":
    main()
