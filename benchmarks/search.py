"""A fixed-budget evolution search on digits, and what it achieved.

Prints candidates per hour, the fraction that failed, the fraction of wall time spent outside
training (proposals, bookkeeping), and the best child's accuracy and FLOPs relative to the
seed model. The search is the README's, run for a wall-clock budget.

    python benchmarks/search.py --minutes 30 [--workdir /tmp/bench_search]
    python benchmarks/search.py --time-split 8     # the README search's time split only,
                                                   # and its per-child stage figures
    python benchmarks/search.py --time-split 8 --pipeline  # the pipeline off vs on
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import runpy
import shutil
import tempfile
import time

import numpy as np

from nas.search.execution.driver import Driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- time split

SPLIT_PARTS = ("proposal", "fit new ops", "compile", "train steps", "input wait", "eval",
               "measurement", "checkpoint I/O", "candidate setup",
               "process start / other in candidate", "waiting for workers", "driver bookkeeping")


class _Timed:
    """Wraps a callable and adds its wall time to a shared total (and to `calls`, a list of
    (first argument, or the result when there is none; seconds) per call, when given)."""

    def __init__(self, fn, totals: dict[str, float], key: str, calls: list | None = None
                 ) -> None:
        self.fn, self.totals, self.key, self.calls = fn, totals, key, calls

    def __call__(self, *args, **kwargs):
        t, result = time.monotonic(), None
        try:
            result = self.fn(*args, **kwargs)
            return result
        finally:
            self.totals[self.key] += time.monotonic() - t
            if self.calls is not None:
                self.calls.append((args[0] if args else result, time.monotonic() - t))


def _median_p90(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return (float(np.median(xs)), float(np.percentile(xs, 90))) if xs else (0.0, 0.0)


def per_child(done: list, proposals: dict, tasks: dict, records: dict, wall: float) -> None:
    """Per-child stage medians and p90 (children only: the seed trains from scratch), the
    time the device stands idle between two children (`device_waits`), the share of wall
    time in train and eval steps, and candidates/hour. `proposals`, `tasks`, `records`:
    {candidate id: seconds} (a child's proposal time holds the failed proposals before it)."""
    children = [c for c in done if c.parent_id is not None]

    def of(c, *names):
        return sum(float(c.metrics.get(n, 0.0) or 0.0) for n in names)

    stages = {
        "proposal": [proposals.get(c.id, 0.0) for c in children],
        "fit new ops (beyond its overlap with compile)": [
            of(c, "fit_seconds") - of(c, "refit_overlap_seconds") for c in children],
        "compile": [of(c, "compile_seconds") for c in children],
        "setup": [of(c, "setup_seconds") for c in children],
        "checkpoint I/O (task, record, in training)": [
            of(c, "checkpoint_seconds") + tasks.get(c.id, 0.0) + records.get(c.id, 0.0)
            for c in children],
        "train steps": [of(c, "train_seconds") for c in children],
        "eval": [of(c, "eval_seconds") for c in children],
        "compilations (count)": [of(c, "compilations") for c in children],
        "fit steps (count)": [of(c, "fit_steps") for c in children],
    }
    outside = [sum(v) for v in zip(*(stages[k] for k in list(stages)[:5]), strict=True)]
    stages["outside train/eval steps (sum of the five above)"] = outside
    stages["device waits for this child"] = device_waits(done)
    print(f"| per child ({len(children)} children) | median | p90 |")
    print("|---|---:|---:|")
    for key, values in stages.items():
        med, p90 = _median_p90(values)
        print(f"| {key} | {med:.2f} | {p90:.2f} |")
    steps = sum(of(c, "train_seconds", "eval_seconds") for c in done)
    print(f"| share of wall time in train/eval steps | {steps / wall:.1%} | |")
    print(f"| candidates/hour | {len(done) / wall * 3600:.0f} | |")
    # The seed's training (from scratch, nothing to overlap) is most of a short run's wall
    # time and its noise: children/hour counts from the seed's result to the last one.
    seed_done = min(c.finished_at for c in done if c.parent_id is None)
    span = max(c.finished_at for c in children) - seed_done if children else 0.0
    print(f"| children/hour after the seed's result | "
          f"{len(children) / max(span, 1e-9) * 3600:.0f} | |")


def device_waits(done: list) -> list[float]:
    """Per child, how long the device stood idle before the child's steps: from the end of
    the previous candidate's device stage (its steps and evaluations) to the start of this
    one's, from the timestamps each worker records (`device_started_at`,
    `device_finished_at`). One device: its candidates run one after another."""
    order = sorted(done, key=lambda c: c.metrics.get("device_started_at", 0.0))
    return [max(float(c.metrics["device_started_at"])
                - float(prev.metrics["device_finished_at"]), 0.0)
            for prev, c in zip(order, order[1:], strict=False)]


def time_split(max_candidates: int, workdir: str, executor: str = "inline",
               overrides: dict | None = None, settings: list[str] = ()) -> list:
    """Run the README digits search for `max_candidates` and print where its wall time went.

    Driver-side parts are timed around the driver's calls (propose; task + record, which
    load and save variables; the executor's submit and poll); in-candidate parts come from
    each candidate's metrics (compile, step loop, input wait, eval, FLOPs/params
    measurement, checkpoints, setup). What a candidate's submit-to-result time holds beyond
    those is process start and per-candidate overhead (graph parsing, dispatch).
    `settings` (`FIELD=VALUE`) change the README config first, `overrides` its search fields.
    """
    from search_arms import apply_settings

    from nas.search.execution import driver as driver_lib

    shutil.rmtree(workdir, ignore_errors=True)
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    config.search.max_candidates = max_candidates
    config.search.executor = executor
    apply_settings(config, settings)
    for key, value in (overrides or {}).items():
        config.search[key] = value
    totals = dict.fromkeys(("propose", "task", "record", "submit", "poll"), 0.0)
    proposals: list = []
    tasks: list = []
    records: list = []
    make = driver_lib.make_executor

    def timed_executor(*args, **kwargs):
        ex = make(*args, **kwargs)
        ex.submit = _Timed(ex.submit, totals, "submit")
        ex.poll = _Timed(ex.poll, totals, "poll")
        return ex

    driver_lib.make_executor = timed_executor
    try:
        driver = Driver(config, workdir)
        driver.propose = _Timed(driver.propose, totals, "propose", proposals)
        driver.task = _Timed(driver.task, totals, "task", tasks)
        driver.record = _Timed(driver.record, totals, "record", records)
        start = time.monotonic()
        study = driver.run(progress=False)
        wall = time.monotonic() - start
    finally:
        driver_lib.make_executor = make
    done = [c for c in study.candidates() if c.status == "done"]

    def total(name: str) -> float:
        return float(sum(c.metrics.get(name, 0.0) or 0.0 for c in done))

    # The fit runs while the steps compile: only its time beyond that overlap is its own.
    fit = total("fit_seconds") - total("refit_overlap_seconds")
    inside = {"fit new ops": fit, "compile": total("compile_seconds"),
              "train steps": total("train_seconds") - total("input_wait_seconds"),
              "input wait": total("input_wait_seconds"), "eval": total("eval_seconds"),
              "measurement": total("measure_seconds"),
              "checkpoint I/O": total("checkpoint_seconds") + totals["task"] + totals["record"],
              "candidate setup": total("setup_seconds")}
    # Candidate time seen by the driver: inline runs it inside submit, workers during poll.
    candidate = totals["submit"] + totals["poll"]
    in_candidate = sum(v for k, v in inside.items() if k != "checkpoint I/O")
    in_candidate += total("checkpoint_seconds")
    parts = dict(inside, proposal=totals["propose"])
    if executor == "inline":
        parts["process start / other in candidate"] = max(candidate - in_candidate, 0.0)
        parts["waiting for workers"] = 0.0
    else:  # candidates overlap the driver: what the driver waited beyond its own work
        parts["process start / other in candidate"] = 0.0
        parts["waiting for workers"] = totals["poll"]
    parts["driver bookkeeping"] = max(wall - sum(parts.values()), 0.0)
    compilations = sum(int(c.metrics.get("compilations", 0) or 0) for c in done)
    print(f"README digits search: {len(done)} candidates done in {wall:.1f} s "
          f"({len(done) / wall * 3600:.0f}/hour), executor {executor}, "
          f"{compilations} compilations")
    print("| part | seconds | share of wall |")
    print("|---|---:|---:|")
    for key in SPLIT_PARTS:
        print(f"| {key} | {parts.get(key, 0.0):.1f} | {parts.get(key, 0.0) / wall:.1%} |")
    # The stages overlap when the pipeline is on, so the parts may sum to more than the
    # wall: what the device did not do is the wall minus its candidates' device stages.
    busy = sum(float(c.metrics["device_finished_at"]) - float(c.metrics["device_started_at"])
               for c in done)
    print(f"| **device idle (wall minus the candidates' steps and evals)** | "
          f"{wall - busy:.1f} | {(wall - busy) / wall:.1%} |")
    print()
    per_proposal, spent = {}, 0.0
    for child_id, seconds in proposals:
        spent += seconds
        if child_id is not None:
            per_proposal[child_id], spent = spent, 0.0
    per_child(done, per_proposal, dict(tasks),
              {o.candidate_id: t for o, t in records}, wall)
    return done


PIPELINE = {"off": {"pipeline_depth": 2, "propose_ahead": 0, "prepare_ahead": 0},
            "on": {"pipeline_depth": 2, "propose_ahead": 1, "prepare_ahead": 1}}


def pipeline(max_candidates: int, workdir: str, settings: list[str] = ()) -> None:
    """The README search with one local worker and `pipeline_depth` 2, the pipeline off
    (serial: the worker proposes nothing ahead and prepares nothing ahead) then on (the
    driver proposes the next child and a second process sets up, fits and compiles it while
    the device trains): the same candidates (checked), and the device's waits. A first
    run, not shown, fills the persistent compilation cache, so both shown runs find it
    warm."""
    print("### warm-up run (fills the compilation cache; not compared)\n")
    time_split(max_candidates, os.path.join(workdir, "warmup"), "local", PIPELINE["on"],
               settings)
    runs = {}
    for name, overrides in PIPELINE.items():
        print(f"\n### pipeline {name}: local executor, {overrides}\n")
        done = time_split(max_candidates, os.path.join(workdir, name), "local", overrides,
                          settings)
        runs[name] = [(c.fingerprint, c.parent_id) for c in sorted(done, key=lambda c: c.id)]
    same = runs["off"] == runs["on"]
    print(f"\nsame candidates (fingerprints and parents, in order) off and on: {same}")


def add_arm_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `--arms` (benchmarks/search_arms.py)."""
    parser.add_argument("--arms", action="store_true",
                        help="compare evolution with random search and Optuna's NSGA-II "
                             "(benchmarks/search_arms.py)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--candidates", type=int, default=0,
                        help="for --arms: a budget of candidates per arm instead of minutes")
    parser.add_argument("--arm", nargs="+", choices=("evolution", "random", "optuna"),
                        default=["evolution", "random"],
                        help="for --arms: which arms to run (optuna: Optuna's NSGA-II on the "
                             "evolution arm's CPU time, benchmarks/search_optuna.py; needs "
                             "pip install -e '.[bench]')")
    parser.add_argument("--optuna-trials", type=int, default=0, metavar="N",
                        help="for --arm optuna: N trials instead of the evolution arm's CPU "
                             "time (to repeat a run exactly)")
    parser.add_argument("--optuna-population", type=int, default=8,
                        help="for --arm optuna: NSGA-II's population size")
    parser.add_argument("--resume", action="store_true",
                        help="for --arms --candidates: extend the studies already in --workdir")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--time-split", type=int, default=0, metavar="N",
                        help="only run the README search for N candidates; print its time split")
    parser.add_argument("--executor", default="inline", help="for --time-split")
    parser.add_argument("--pipeline", action="store_true",
                        help="with --time-split N: the pipeline off, then on, side by side")
    add_arm_arguments(parser)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set a config field of the README search (--time-split) or of "
                             "every arm (--arms), e.g. search.validation_fraction=0.2 "
                             "(repeatable)")
    args = parser.parse_args()
    if args.arms:
        from search_arms import compare

        compare(args.seeds, args.minutes, args.workdir or tempfile.mkdtemp(prefix="arms_"),
                args.candidates, args.resume, tuple(args.arm), args.set,
                {"trials": args.optuna_trials, "population": args.optuna_population})
        return
    if args.time_split and args.pipeline:
        pipeline(args.time_split, args.workdir or tempfile.mkdtemp(prefix="bench_pipe_"),
                 args.set)
        return
    if args.time_split:
        time_split(args.time_split, args.workdir or tempfile.mkdtemp(prefix="bench_split_"),
                   args.executor, settings=args.set)
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_search_")
    shutil.rmtree(workdir, ignore_errors=True)
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    config.search.max_candidates = 10_000
    config.search.executor = "inline"
    deadline = time.monotonic() + args.minutes * 60

    driver = Driver(config, workdir)
    original_record = driver.record

    def record(outcome):  # stop claiming new work once the budget is spent
        original_record(outcome)
        if time.monotonic() > deadline:
            driver.search = dataclasses.replace(
                driver.search, max_candidates=sum(driver.study.counts().values()))

    driver.record = record
    start = time.monotonic()
    study = driver.run(progress=False)
    wall = time.monotonic() - start

    candidates = study.candidates()
    finished = [c for c in candidates if c.status in ("done", "failed")]
    training = sum(c.finished_at - c.started_at for c in finished if c.started_at)
    done = study.candidates("done")
    seed = next(c for c in candidates if c.parent_id is None)
    children = [c for c in done if c.parent_id is not None]
    proposals = int(study.get_state("proposals", 0))
    print(f"budget {args.minutes:.0f} min, wall {wall / 60:.1f} min, workdir {workdir}")
    print("| metric | value |")
    print("|---|---|")
    print(f"| candidates finished | {len(finished)} |")
    print(f"| candidates per hour | {len(finished) / wall * 3600:.1f} |")
    print(f"| fraction failed (training) | {sum(c.status == 'failed' for c in finished) / max(len(finished), 1):.2f} |")  # noqa: E501
    print(f"| mutation proposals / children | {proposals} / {len(children) + sum(c.parent_id is not None and c.status == 'failed' for c in finished)} |")  # noqa: E501
    print(f"| fraction of wall time outside training | {1 - training / wall:.3f} |")
    print(f"| seed accuracy, MFLOPs | {seed.accuracy:.4f}, {seed.flops / 1e6:.1f} |")
    if children:
        best = max(children, key=lambda c: (c.accuracy, -c.flops))
        cheap = [c for c in children if c.accuracy >= seed.accuracy]
        print(f"| best child accuracy / seed | {best.accuracy / seed.accuracy:.3f} |")
        print(f"| best child FLOPs / seed | {best.flops / seed.flops:.3f} |")
        if cheap:
            lean = min(cheap, key=lambda c: c.flops)
            ratio = lean.flops / seed.flops
            print(f"| cheapest child >= seed accuracy: FLOPs / seed | {ratio:.3f} "
                  f"(acc {lean.accuracy:.4f}) |")


if __name__ == "__main__":
    main()
