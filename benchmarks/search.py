"""A fixed-budget evolution search on digits, and what it achieved.

Prints candidates per hour, the fraction that failed, the fraction of wall time spent outside
training (proposals, bookkeeping), and the best child's accuracy and FLOPs relative to the
seed model. The search is the README's, run for a wall-clock budget.

    python benchmarks/search.py --minutes 30 [--workdir /tmp/bench_search]
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import tempfile
import time

from nas.search.driver import Driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--arms", action="store_true",
                        help="compare evolution with random search (benchmarks/search_arms.py)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    if args.arms:
        from search_arms import compare

        compare(args.seeds, args.minutes, args.workdir or tempfile.mkdtemp(prefix="arms_"))
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
            driver.search.max_candidates = sum(driver.study.counts().values())

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
