"""Paired comparison of two models evaluated on the same examples.

Why paired: two candidates of one search are scored on the same validation (and test)
images, and most images are right for both. What tells them apart is only the images where
they disagree, so the difference of their accuracies is far less noisy than two separate
Wilson intervals suggest; comparing overlapping intervals misses real differences.

The interval is the exact one that goes with McNemar's exact test. Of the m examples where
the two models disagree, a got k right; given m, k is binomial with probability pi, and the
difference of accuracies is m (2 pi - 1) / n. The Clopper-Pearson 95 % interval of pi
(exact binomial tails, found by bisection: deterministic, no bootstrap draws) maps to the
interval of the difference. Why this one: it excludes 0 exactly when McNemar's exact
two-sided test rejects "no difference" at 5 %, the test an ML reader expects for two
classifiers on one test set; it is never narrower than the exact test allows, even with a
handful of disagreements (5 to 0 is not yet evidence: p = 0.0625); and two identical
models get [0, 0]: no disagreement, no difference. It treats m as given, which is what a
paired test does. The decision is "better" or "worse" when the interval excludes 0, else
"within noise".
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np

from nas.search.strategy.intervals import Z95

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
    repeat (on 143 images there are at most 143^2 / 2 tables), while each exact interval
    takes milliseconds."""
    low, high = interval(n - only_a - only_b, only_a, only_b, 0, z)
    return Paired((only_a - only_b) / n, low, high, n, only_a, only_b)


def interval(both: int, only_a: int, only_b: int, neither: int, z: float = Z95
             ) -> tuple[float, float]:
    """The exact (McNemar / Clopper-Pearson) interval of p_a - p_b from the 2x2 counts,
    at the two-sided level that `z` stands for (95 % for Z95)."""
    n = both + only_a + only_b + neither
    m = only_a + only_b
    if m == 0:
        return 0.0, 0.0
    alpha = math.erfc(z / math.sqrt(2.0))  # two-sided tail mass of the normal at z
    low, high = clopper_pearson(only_a, m, alpha)
    return m * (2.0 * low - 1.0) / n, m * (2.0 * high - 1.0) / n


def clopper_pearson(k: int, m: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval of a binomial probability, k successes of m:
    the lower end has P(X >= k) = alpha / 2, the upper P(X <= k) = alpha / 2."""
    low = 0.0 if k == 0 else _bisect(lambda p: _upper_tail(k, m, p) - alpha / 2.0)
    high = 1.0 if k == m else _bisect(lambda p: alpha / 2.0 - _lower_tail(k, m, p))
    return low, high


def _log_pmf(m: int, p: float) -> np.ndarray:
    """log P(X = j), j = 0..m, of Binomial(m, p) for 0 < p < 1."""
    j = np.arange(m + 1, dtype=np.float64)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log((m - j[1:] + 1) / j[1:]))])
    return log_choose + j * math.log(p) + (m - j) * math.log1p(-p)


def _lower_tail(k: int, m: int, p: float) -> float:
    """P(X <= k)."""
    return float(np.sum(np.exp(_log_pmf(m, p)[: k + 1])))


def _upper_tail(k: int, m: int, p: float) -> float:
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
