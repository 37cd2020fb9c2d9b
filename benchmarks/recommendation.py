"""Can the summary's recommendation be trusted? Three README searches, one per search seed.

For each seed it runs (or resumes) the README search with a budget of candidates,

    nas-search --config=configs/digits_cnn_search.py --workdir=DIR/seed_S
        --config.search.seed=S --config.search.max_candidates=N

and prints, for the candidate the summary recommends (`nas.search.strategy.recommend`): its FLOPs
as a fraction of the seed's, its paired validation difference (what chose it), its test
accuracy against the seed's 95 % Wilson test interval, and its paired test difference
against minus the non-inferiority margin. The criterion: in every search the
recommended child's test accuracy is inside the seed's test interval and its paired test
difference is at least -margin; in at least 2 of 3 it costs at most half the seed's FLOPs.
Also the CPU minutes of each search (user + system of the search's processes).

    python benchmarks/recommendation.py --workdir /tmp/bench_rec [--seeds 0 1 2]
        [--candidates 24]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "digits_cnn_search.py")


def run_search(workdir: str, seed: int, candidates: int) -> tuple[float, float]:
    """(CPU minutes, wall minutes) of one search run to its budget (0 when finished)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "nas.search.cli", f"--config={CONFIG}",
                    f"--workdir={workdir}", f"--config.search.seed={seed}",
                    f"--config.search.max_candidates={candidates}", "--noprogress"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / 60.0, (time.monotonic() - start) / 60.0


def measure(workdir: str, margin: float | None = None) -> dict:
    """The recommendation of the study in `workdir` (at its configured margin, or
    `margin` points), and how it does on test."""
    from nas.search.store.study import Study
    from nas.search.strategy import recommend
    from nas.stats import intervals

    study = Study.load(workdir)
    done = study.candidates("done")
    pairs = recommend.Comparisons.of(study)
    margin = recommend.margin_pt(study.config) if margin is None else margin
    rec = recommend.recommend(done, pairs, margin)
    seed, chosen = rec.seed, rec.candidate
    seed_test = seed.extra_metrics["test_accuracy"]
    low, high = intervals.wilson(seed_test, int(seed.extra_metrics["test_examples"]))
    test = chosen.extra_metrics["test_accuracy"]
    paired_test = pairs.pair(chosen, seed, "test")
    study.close()
    return {
        "done": len(done), "margin": margin, "seed": seed, "chosen": chosen, "rec": rec,
        "seed_test": seed_test, "seed_low": low, "seed_high": high, "test": test,
        "inside": low <= test <= high, "paired_test": paired_test,
        # the criterion is the paired test difference itself, not its interval
        "noninferior": paired_test is None or 100 * paired_test.difference >= -margin,
        "ratio": rec.flops_ratio if rec.flops_ratio is not None else 1.0,
    }


def _pt(p, seed_itself: bool = False) -> str:
    return "seed itself" if p is None or seed_itself else \
        f"{100 * p.difference:+.2f} [{100 * p.low:+.2f}, {100 * p.high:+.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--report-only", action="store_true",
                        help="only read the studies already in --workdir")
    parser.add_argument("--margins", type=float, nargs="*", default=[],
                        help="also recommend at these margins (points; default: the "
                             "studies' search.selection.noninferiority_pt)")
    args = parser.parse_args()
    times = {}
    for seed in args.seeds:
        path = os.path.join(args.workdir, f"seed_{seed}")
        if not args.report_only:
            times[seed] = run_search(path, seed, args.candidates)
            print(f"seed {seed}: {times[seed][0]:.1f} CPU min, {times[seed][1]:.1f} min wall",
                  flush=True)
    for margin in args.margins or [None]:
        table(args, times, margin)


def table(args: argparse.Namespace, times: dict, margin: float | None) -> None:
    rows = [(seed, measure(os.path.join(args.workdir, f"seed_{seed}"), margin))
            for seed in args.seeds]
    print(f"\nmargin {rows[0][1]['margin']:g} pt:\n")
    print("| search seed | done | CPU min | recommended | FLOPs / seed | val paired pt "
          "[95%] | seed test [95% Wilson] | its test | inside | test paired pt [95%] | "
          "difference >= -margin |")
    print("|---:|---:|---:|---:|---:|---|---|---:|:-:|---|:-:|")
    for seed, m in rows:
        cpu = f"{times[seed][0]:.1f}" if seed in times else ""
        c = m["chosen"]
        name = f"{c.id}" + (" (the seed)" if c.id == m["seed"].id else "")
        print(f"| {seed} | {m['done']} | {cpu} | {name} | {m['ratio']:.3f} | "
              f"{_pt(m['rec'].validation)} | {m['seed_test']:.4f} [{m['seed_low']:.4f}, "
              f"{m['seed_high']:.4f}] | {m['test']:.4f} | {'yes' if m['inside'] else 'no'} | "
              f"{_pt(m['paired_test'], c.id == m['seed'].id)} | "
              f"{'yes' if m['noninferior'] else 'no'} |")
    ok = sum(m["inside"] and m["noninferior"] for _, m in rows)
    cheap = sum(m["ratio"] <= 0.5 for _, m in rows)
    print(f"\ninside the seed's test interval and paired test difference >= -margin: "
          f"{ok} of {len(rows)} (criterion: all); at most 50 % of the seed's FLOPs: {cheap} "
          f"of {len(rows)} (criterion: at least 2 of 3); margin "
          f"{rows[0][1]['margin']:g} pt")


if __name__ == "__main__":
    main()
