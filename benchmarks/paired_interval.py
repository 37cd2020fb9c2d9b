"""How often each paired interval of a difference in accuracy covers the truth.

Simulates tables of n examples (two models scored on the same examples) from known rates
of "only the first right" (p10) and "only the second right" (p01), and for each interval
counts how often it holds the true difference p10 - p01, and how often the truth lies below
its lower end (what a non-inferiority decision reads). Side by side, on the same draws:

- tango: Tango's score interval (`nas.stats.tango`, what the summary prints now);
- conditional: the exact conditional interval (Clopper-Pearson on b / (b + c), scaled by
  (b + c) / n), what the summary printed before;
- bootstrap: the paired percentile bootstrap (examples resampled with their pairing).

    python benchmarks/paired_interval.py [--n 143 360] [--draws 4000] [--boot 2000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from nas.stats import paired, tango

SCENARIOS = ((0.005, 0.005), (0.01, 0.03), (0.02, 0.02), (0.05, 0.02), (0.03, 0.0),
             (0.0, 0.02), (0.3, 0.05), (0.15, 0.15))
ALPHA = math.erfc(paired.Z95 / math.sqrt(2.0))


def conditional(n: int, b: int, c: int) -> tuple[float, float]:
    """The exact conditional interval the summary used before Tango's."""
    m = b + c
    if m == 0:
        return 0.0, 0.0
    low, high = paired.clopper_pearson(b, m, ALPHA)
    return m * (2 * low - 1) / n, m * (2 * high - 1) / n


def bootstrap(n: int, b: int, c: int, rng: np.random.Generator, boot: int
              ) -> tuple[float, float]:
    """Percentile interval of the difference over `boot` paired resamples."""
    counts = rng.multinomial(n, [b / n, c / n, 1.0 - (b + c) / n], size=boot)
    diff = (counts[:, 0] - counts[:, 1]) / n
    return float(np.quantile(diff, ALPHA / 2)), float(np.quantile(diff, 1 - ALPHA / 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[143, 360])
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--boot", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(45)
    print("| n | p10 | p01 | tango cover / low miss | conditional cover / low miss | "
          "bootstrap cover / low miss |")
    print("|---:|---:|---:|---|---|---|")
    for n in args.n:
        totals = {"tango": [], "conditional": [], "bootstrap": []}
        for p10, p01 in SCENARIOS:
            draws = rng.multinomial(n, [p10, p01, 1.0 - p10 - p01], size=args.draws)[:, :2]
            tables, at = np.unique(draws, axis=0, return_inverse=True)
            at = at.reshape(-1)
            low, high = tango.bounds(n, tables[:, 0], tables[:, 1])
            found = {"tango": (low, high)}
            for name, fn in (("conditional", lambda b, c, n=n: conditional(n, b, c)),
                             ("bootstrap",
                              lambda b, c, n=n: bootstrap(n, b, c, rng, args.boot))):
                pairs = np.array([fn(int(b), int(c)) for b, c in tables])
                found[name] = (pairs[:, 0], pairs[:, 1])
            truth = p10 - p01
            cells = []
            for name, (lo, hi) in found.items():
                lo, hi = lo[at], hi[at]
                cover, miss = np.mean((lo <= truth) & (truth <= hi)), np.mean(truth < lo)
                totals[name].append((cover, miss))
                cells.append(f"{cover:.3f} / {miss:.3f}")
            print(f"| {n} | {p10} | {p01} | " + " | ".join(cells) + " |")
        means = [f"{np.mean([c for c, _ in v]):.3f} / {np.mean([m for _, m in v]):.3f}"
                 for v in totals.values()]
        print(f"| {n} | mean | | " + " | ".join(means) + " |")


if __name__ == "__main__":
    main()
