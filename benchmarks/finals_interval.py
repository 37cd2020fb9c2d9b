"""Coverage and power of the finals' interval, by simulation at the finals' counts.

The world is the one the tests check (`tests/stats/test_repeated_interval.py`: calibrated
on the README search's finals, with run-to-run noise and occasional bad runs). For each
setting, side by side on the same draws: the run part pooled over the table's
architectures (what the finals print) and from the one comparison's two alone. Coverage:
how often the interval holds the true difference (a finalist 0.3 logits below the seed);
power: how often a finalist as accurate as the seed is found non-inferior at 2 points.

    python benchmarks/finals_interval.py [--sims 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nas.stats.repeated import compare_repeated, run_noise  # noqa: E402
from tests.stats.test_repeated_interval import World  # noqa: E402

SETTINGS = {
    "README finals: 2 finalists, 1 repeat of 3 folds": World(),
    "3 finalists, 1 repeat": World(finalists=3),
    "a lone finalist, 1 repeat": World(finalists=1),
    "a lone finalist, 2 repeats": World(finalists=1, repeats=2),
    "twice the run luck, worse bad runs": World(run_sd=0.4, bad=3.0),
    "no run luck": World(run_sd=0.0, bad_p=0.0),
}


def measure(world: World, sims: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """{"pooled" | "alone": (coverage at a gap, power when tied)}."""
    out = {}
    for name in ("pooled", "alone"):
        counts = []
        for gap, check in ((world.tied() - 0.3, "cover"), (world.tied(), "pass")):
            truth = world.truth(gap)
            rng = np.random.default_rng(seed)
            hits = 0
            for _ in range(sims):
                seed_bits, others, runs = world.draw(rng, gap)
                noise = (run_noise([(b, runs) for b in (seed_bits, *others)])
                         if name == "pooled" else None)
                found = compare_repeated(others[0], seed_bits, runs, noise=noise)
                hits += (found.low <= truth <= found.high if check == "cover"
                         else found.noninferior(2.0))
            counts.append(hits / sims)
        out[name] = (counts[0], counts[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=2000)
    args = parser.parse_args()
    print("setting | pooled over the table: coverage, power | the pair alone: coverage, "
          "power")
    for label, world in SETTINGS.items():
        found = measure(world, args.sims)
        (pc, pp), (ac, ap) = found["pooled"], found["alone"]
        print(f"{label} ({dataclasses.asdict(world)['n']} examples) | {pc:.3f}, {pp:.3f} | "
              f"{ac:.3f}, {ap:.3f}", flush=True)


if __name__ == "__main__":
    main()
