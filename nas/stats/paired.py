"""Paired comparison of two models evaluated on the same examples.

Why paired: two candidates are scored on the same images, most right for both; only the
images where they disagree tell them apart, so their difference is far less noisy than two
separate Wilson intervals suggest. Its interval is Tango's (`nas.stats.tango`),
which counts the discordant examples as well as their direction: a child that loses 5
test images of 360 and gains none gets [-3.21, -0.32] points, not the exact conditional
interval's [-1.39, +0.06]. The decision is "better" or "worse" when it excludes 0, else
"within noise"; non-inferiority at a margin reads its lower end.

McNemar's exact test (`mcnemar`) is selection's test of "cannot be told apart"
(`nas.search.strategy.noise_ties`): it depends only on the disagreements;
`McNemarBounds` answers it for many pairs at once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from nas.stats import tango
from nas.stats.intervals import Z95


@dataclasses.dataclass(frozen=True)
class Paired:
    """`a` against `b` on the same n examples: a - b (a fraction), its 95 % interval, and
    the 2x2 table's off-diagonal counts."""

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
        """Whether the interval's lower end is at least -`margin_pt` accuracy points."""
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
    """Paired difference of `a` and `b`, boolean vectors of which examples each got right."""
    a = np.asarray(a, dtype=bool).reshape(-1)
    b = np.asarray(b, dtype=bool).reshape(-1)
    if a.size != b.size or a.size == 0:
        raise ValueError(f"paired comparison: expected two correctness vectors on the same "
                         f"examples (equal, non-zero lengths), got {a.size} and {b.size}")
    return from_counts(int(a.size), int(np.sum(a & ~b)), int(np.sum(~a & b)), z)


@functools.lru_cache(maxsize=65536)
def from_counts(n: int, only_a: int, only_b: int, z: float = Z95) -> Paired:
    """`compare` from its counts. Cached: a summary compares thousands of children with the
    seed, and their counts repeat."""
    low, high = tango.bounds_one(n, only_a, only_b, z)
    return Paired((only_a - only_b) / n, low, high, int(n), int(only_a), int(only_b))


def many(n: int, only_a: Sequence[int] | np.ndarray, only_b: Sequence[int] | np.ndarray,
         z: float = Z95) -> list[Paired]:
    """`from_counts` of many tables on the same n examples at once (the same bits)."""
    low, high = tango.bounds(n, np.reshape(only_a, -1), np.reshape(only_b, -1), z)  # checks
    b = np.reshape(only_a, -1).astype(np.int64)
    c = np.reshape(only_b, -1).astype(np.int64)
    return [Paired((x - y) / n, lo, hi, int(n), x, y)
            for x, y, lo, hi in zip(b.tolist(), c.tolist(), low.tolist(), high.tolist(),
                                    strict=True)]


def interval(both: int, only_a: int, only_b: int, neither: int, z: float = Z95
             ) -> tuple[float, float]:
    """Tango's score interval of p_a - p_b from the 2x2 counts, at the level of `z`."""
    return tango.bounds_one(both + only_a + only_b + neither, only_a, only_b, z)


def mcnemar(a: np.ndarray, b: np.ndarray, z: float = Z95) -> str:
    """McNemar's exact two-sided test of "no difference" between correctness vectors `a`
    and `b`: "better" / "worse" (a vs b) when it rejects at the level of `z`, else "within
    noise". It rejects exactly when the Clopper-Pearson interval of only_a / m excludes 1/2."""
    p = compare(a, b, z)
    m = p.only_a + p.only_b
    if m == 0:
        return "within noise"
    low, high = clopper_pearson(p.only_a, m, math.erfc(z / math.sqrt(2.0)))
    return "better" if low > 0.5 else "worse" if high < 0.5 else "within noise"


def clopper_pearson(k: int, m: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval of a binomial probability, k successes of m."""
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


class McNemarBounds:
    """Which paired counts are within noise: with m disagreements of which a has k right,
    McNemar's exact test finds no difference exactly when `worse_to[m] < k <
    better_from[m]`, found once per m by bisection over the binomial tails at 1/2."""

    def __init__(self, z: float = Z95) -> None:
        self.alpha = math.erfc(z / math.sqrt(2.0))
        self._bounds: dict[int, tuple[int, int]] = {0: (-1, 1)}

    def within(self, k: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Elementwise: is "k of m disagreements right" within noise?"""
        k = np.asarray(k, dtype=np.int64)
        m = np.asarray(m, dtype=np.int64)
        unique = np.unique(m)
        worse_to = np.empty(len(unique), dtype=np.int64)
        better_from = np.empty(len(unique), dtype=np.int64)
        for i, mi in enumerate(unique.tolist()):
            worse_to[i], better_from[i] = self._of(mi)
        at = np.searchsorted(unique, m)
        return (worse_to[at] < k) & (k < better_from[at])

    def _of(self, m: int) -> tuple[int, int]:
        if m not in self._bounds:
            half = self.alpha / 2.0
            # "better": k > 0 and P(X >= k | 1/2) < alpha/2, true from some k up.
            better_from = _first(1, m + 1, lambda k: upper_tail(k, m, 0.5) < half)
            # "worse": k < m and P(X <= k | 1/2) <= alpha/2, true up to some k.
            worse_to = _first(0, m, lambda k: not lower_tail(k, m, 0.5) <= half) - 1
            self._bounds[m] = (worse_to, better_from)
        return self._bounds[m]

    def span(self, accuracy: np.ndarray | float, count: np.ndarray | int) -> np.ndarray:
        """An upper bound on how much less accurate than `accuracy` a row on the same
        `count` examples can be within noise of it, by Hoeffding's bound: within noise
        needs (2k - m)^2 <= 2 m ln(2/alpha), and a row d below has m <= count (2 - 2
        accuracy + d) disagreements."""
        log = math.log(2.0 / self.alpha)
        worst = np.maximum(0.0, 2.0 - 2.0 * np.asarray(accuracy, dtype=float))
        count = np.maximum(np.asarray(count, dtype=float), 1.0)
        return log / count + np.sqrt((log / count) ** 2 + 2.0 * log * worst / count) + 1e-12


def _first(lo: int, hi: int, predicate) -> int:
    """The smallest k in [lo, hi) where a monotone predicate holds; hi if none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
