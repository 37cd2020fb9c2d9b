"""Paired comparison of two models evaluated on the same examples.

Why paired: two candidates of one search are scored on the same validation (and test)
images, and most images are right for both. What tells them apart is only the images where
they disagree, so the difference of their accuracies is far less noisy than two separate
Wilson intervals suggest; comparing overlapping intervals misses real differences.

The interval of the difference is Tango's score interval (`nas.search.strategy.tango`): it
accounts for how many examples are discordant as well as which way they went, so a child
that loses 5 test images of 360 and gains none gets [-3.21, -0.32] points, not the exact
conditional interval's [-1.39, +0.06], whose bound is the point estimate itself whenever
every disagreement goes one way. The decision is "better" or "worse" when the interval
excludes 0, else "within noise"; non-inferiority at a margin reads its lower end.

McNemar's exact test (the exact conditional binomial test of "no difference", `mcnemar`)
stays for selection's noise ties (`nas.search.strategy.intervals`): it is the right test of
"these two cannot be told apart", and it depends only on the disagreements.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from nas.search.strategy import tango
from nas.train.intervals import Z95

DECISIONS = ("better", "worse", "within noise")


@dataclasses.dataclass(frozen=True)
class Paired:
    """`a` against `b` on the same n examples: difference of accuracies (a - b, a
    fraction) with its 95 % interval, and the 2x2 table's off-diagonal counts."""

    difference: float
    low: float
    high: float
    n: int
    only_a: int  # examples a got right and b wrong
    only_b: int  # examples b got right and a wrong

    @property
    def decision(self) -> str:
        """"better" / "worse" (a vs b) when the interval excludes 0, else "within noise"."""
        if self.low > 0.0:
            return "better"
        if self.high < 0.0:
            return "worse"
        return "within noise"

    def noninferior(self, margin_pt: float) -> bool:
        """Whether a is at most `margin_pt` accuracy points worse than b: the interval's
        lower end is at least -margin."""
        return self.low >= -float(margin_pt) / 100.0

    def text(self) -> str:
        """e.g. "+0.70 pt [-1.23, +2.61] paired, within noise"."""
        return (f"{100 * self.difference:+.2f} pt [{100 * self.low:+.2f}, "
                f"{100 * self.high:+.2f}] paired, {self.decision}")

    def to_dict(self) -> dict[str, float | int | str]:
        return {"difference": self.difference, "low": self.low, "high": self.high,
                "n": self.n, "only_a": self.only_a, "only_b": self.only_b,
                "decision": self.decision}


def comparable(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two correctness vectors can be paired (both known, same examples)."""
    return a is not None and b is not None and np.size(a) == np.size(b) and np.size(a) > 0


def compare(a: np.ndarray, b: np.ndarray, z: float = Z95) -> Paired:
    """Paired difference of accuracies of `a` and `b`, boolean vectors of which examples
    each model got right, in the same example order."""
    a = np.asarray(a, dtype=bool).reshape(-1)
    b = np.asarray(b, dtype=bool).reshape(-1)
    if a.size != b.size or a.size == 0:
        raise ValueError(f"paired comparison: expected two correctness vectors on the same "
                         f"examples (equal, non-zero lengths), got {a.size} and {b.size}")
    return from_counts(int(a.size), int(np.sum(a & ~b)), int(np.sum(~a & b)), z)


@functools.lru_cache(maxsize=65536)
def from_counts(n: int, only_a: int, only_b: int, z: float = Z95) -> Paired:
    """`compare` from its counts: n examples, only_a right only for a, only_b only for b.
    Cached: a summary compares thousands of children with the seed, and their counts
    repeat (on 143 images there are at most 143^2 / 2 tables)."""
    low, high = tango.bounds_one(n, only_a, only_b, z)
    return Paired((only_a - only_b) / n, low, high, int(n), int(only_a), int(only_b))


def many(n: int, only_a: Sequence[int] | np.ndarray, only_b: Sequence[int] | np.ndarray,
         z: float = Z95) -> list[Paired]:
    """`from_counts` of many tables on the same n examples at once (each interval the same
    bits as alone): the report compares 100,000 children with the seed."""
    low, high = tango.bounds(n, np.reshape(only_a, -1), np.reshape(only_b, -1), z)  # checks
    b = np.reshape(only_a, -1).astype(np.int64)
    c = np.reshape(only_b, -1).astype(np.int64)
    return [Paired((x - y) / n, lo, hi, int(n), x, y)
            for x, y, lo, hi in zip(b.tolist(), c.tolist(), low.tolist(), high.tolist(),
                                    strict=True)]


def interval(both: int, only_a: int, only_b: int, neither: int, z: float = Z95
             ) -> tuple[float, float]:
    """Tango's score interval of p_a - p_b from the 2x2 counts, at the two-sided level
    that `z` stands for (95 % for Z95)."""
    return tango.bounds_one(both + only_a + only_b + neither, only_a, only_b, z)


def mcnemar(a: np.ndarray, b: np.ndarray, z: float = Z95) -> str:
    """McNemar's exact two-sided test of "no difference" between correctness vectors `a`
    and `b`: "better" / "worse" (a vs b) when it rejects at the level `z` stands for, else
    "within noise". Selection's noise ties use this test (`ties.McNemarBounds`)."""
    p = compare(a, b, z)
    return mcnemar_counts(p.only_a, p.only_b, z)


def mcnemar_counts(only_a: int, only_b: int, z: float = Z95) -> str:
    """`mcnemar` from the discordant counts: the exact conditional (Clopper-Pearson)
    interval of only_a / (only_a + only_b) excludes 1/2 exactly when the test rejects."""
    m = only_a + only_b
    if m == 0:
        return "within noise"
    low, high = clopper_pearson(only_a, m, math.erfc(z / math.sqrt(2.0)))
    return "better" if low > 0.5 else "worse" if high < 0.5 else "within noise"


def clopper_pearson(k: int, m: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval of a binomial probability, k successes of m:
    the lower end has P(X >= k) = alpha / 2, the upper P(X <= k) = alpha / 2."""
    low = 0.0 if k == 0 else _bisect(lambda p: upper_tail(k, m, p) - alpha / 2.0)
    high = 1.0 if k == m else _bisect(lambda p: alpha / 2.0 - lower_tail(k, m, p))
    return low, high


def _log_pmf(m: int, p: float) -> np.ndarray:
    """log P(X = j), j = 0..m, of Binomial(m, p) for 0 < p < 1."""
    j = np.arange(m + 1, dtype=np.float64)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log((m - j[1:] + 1) / j[1:]))])
    return log_choose + j * math.log(p) + (m - j) * math.log1p(-p)


def lower_tail(k: int, m: int, p: float) -> float:
    """P(X <= k)."""
    return float(np.sum(np.exp(_log_pmf(m, p)[: k + 1])))


def upper_tail(k: int, m: int, p: float) -> float:
    """P(X >= k)."""
    return float(np.sum(np.exp(_log_pmf(m, p)[k:])))


def _bisect(f: Callable[[float], float], iterations: int = 60) -> float:
    """The root in (0, 1) of an increasing function `f` (to about 1e-18)."""
    lo, hi = 0.0, 1.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0.0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
