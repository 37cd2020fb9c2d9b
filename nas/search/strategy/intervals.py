"""Accuracies that noise cannot tell apart: Wilson intervals, and tie groups of a population.

Why: an accuracy measured on n examples moves by 1/n per example, and its standard error
near 0.98 on 360 examples is 0.7 points; a difference inside that is not evidence. The
Wilson score interval (`nas.train.intervals`) stays inside [0, 1] and behaves near 100 %.

The tie groups (`NoiseTies`): from the most accurate down (equal accuracies by row), each
row not yet grouped heads a group and takes every ungrouped row below it that it ties
with. Two rows tie when both have per-example validation results on the same examples and
McNemar's exact test (`nas.search.strategy.paired.mcnemar`) does not reject; otherwise when
both sizes are known and each accuracy lies inside the other's 95 % Wilson interval. A row
of unknown size is never grouped. Selection reads each row's accuracy as its head's, so a
cost decides between candidates noise cannot separate.

Why kept incrementally: the study only grows, and a new row joins the first head above it
that it ties with, which changes nothing else; only a row that ties with no head above it
starts a group and regroups the rows below it. So a proposal over 100,000 candidates costs
a pass over the heads, not a regrouping of the population.
"""

from __future__ import annotations

import math

import numpy as np

from nas.search.strategy import paired
from nas.search.strategy.growing import Growing
from nas.train.intervals import Z95, wilson


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def text(accuracy: float, n: int | None) -> str:
    """e.g. "0.9750 [0.948, 0.988] n=360" (no interval when n is unknown)."""
    if not n:
        return f"{accuracy:.4f}"
    low, high = wilson(accuracy, int(n))
    return f"{accuracy:.4f} [{low:.3f}, {high:.3f}] n={int(n)}"


def compare(child: tuple[float, int | None], seed: tuple[float, int | None]) -> str:
    """A child's accuracy against its seed's: "better", "worse", or "within noise" when
    their intervals overlap or a size is unknown."""
    (a, n), (b, m) = child, seed
    if not n or not m or overlap(wilson(a, int(n)), wilson(b, int(m))):
        return "within noise"
    return "better" if a > b else "worse"


def tied(a: float, n: int, b: float, m: int) -> bool:
    """Whether accuracies `a` (on n examples) and `b` (on m) lie inside one another's
    interval: the tie of selection and the summary (stricter than overlapping)."""
    a_low, a_high = wilson(a, n)
    b_low, b_high = wilson(b, m)
    return a_low <= b <= a_high and b_low <= a <= b_high


def wilson_arrays(accuracies: np.ndarray, sizes: np.ndarray, z: float = Z95
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`wilson` of many accuracies at once, with the same arithmetic (the same bits)."""
    a = np.asarray(accuracies, dtype=float)
    n = np.asarray(sizes, dtype=float)
    bad_n = ~((n >= 1) & (n == np.floor(n)))
    if bad_n.any():
        raise ValueError(f"wilson: n must be an integer >= 1 (examples measured), got "
                         f"{n[np.argmax(bad_n)]!r}")
    bad_a = ~((a >= 0.0) & (a <= 1.0))
    if bad_a.any():
        raise ValueError(f"wilson: accuracy must be a fraction in [0, 1], got "
                         f"{float(a[np.argmax(bad_a)])!r}")
    z2 = z * z
    center = (a + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * np.sqrt(a * (1 - a) / n + z2 / (4 * n * n))
    return np.maximum(0.0, center - half), np.minimum(1.0, center + half)


# Rows inserted one by one up to this many at a time; a larger batch regroups all.
_INCREMENTAL = 64


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
            better_from = _first(1, m + 1, lambda k: paired.upper_tail(k, m, 0.5) < half)
            # "worse": k < m and P(X <= k | 1/2) <= alpha/2, true up to some k.
            worse_to = _first(0, m, lambda k: not paired.lower_tail(k, m, 0.5) <= half) - 1
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


class NoiseTies:
    """The tie groups of rows appended over time (row = index in append order)."""

    def __init__(self, z: float = Z95) -> None:
        self.z = z
        self.bounds = McNemarBounds(z)
        self._columns = {
            "acc": Growing(float), "sized": Growing(bool), "low": Growing(float),
            "high": Growing(float),
            "counts": Growing(np.int64),  # per-example results held (0: none)
            "bits": Growing(np.uint8, width=0), "head": Growing(np.int64),
            "order": Growing(np.int64),  # rows, most accurate first, then by row
            "sorted_neg": Growing(float),  # -acc[order]: ascending, for searchsorted
            "heads_sorted": Growing(bool),  # whether the row at each sorted place heads
            "value": Growing(float)}  # acc[head]: what selection ranks by
        self._widest = 0.0  # how far below a head its ties can lie, at most

    def __getattr__(self, name: str) -> np.ndarray:
        columns = self.__dict__.get("_columns", {})
        if name in columns:
            return columns[name].view
        raise AttributeError(name)

    def __len__(self) -> int:
        return len(self._columns["acc"])

    def values(self) -> np.ndarray:
        """Each row's accuracy replaced by its group head's (a view: no copy)."""
        return self.value

    def extend(self, accuracies: np.ndarray, sizes: np.ndarray,
               bits: np.ndarray | None = None, counts: np.ndarray | None = None) -> bool:
        """Append rows: accuracies (fractions), sizes (NaN or 0: unknown; read as int(n)),
        and optionally packed validation results (`bits`) with how many examples they
        hold (`counts`, 0: none). Returns whether the rows before kept their values."""
        acc = np.asarray(accuracies, dtype=float).reshape(-1)
        if not len(acc):
            return True
        sizes = np.trunc(np.asarray(sizes, dtype=float).reshape(-1))
        sized = ~np.isnan(sizes) & (sizes != 0)
        low, high = np.full(len(acc), np.nan), np.full(len(acc), np.nan)
        if sized.any():
            low[sized], high[sized] = wilson_arrays(acc[sized], sizes[sized], self.z)
        counts = np.zeros(len(acc), np.int64) if counts is None else np.asarray(counts)
        reach = np.where(counts > 0, np.fmin(low, acc - self.bounds.span(acc, counts)), low)
        self._widest = float(np.nanmax(np.append(acc - reach, self._widest)))
        first = len(self)
        columns = self._columns
        for name, values in (("acc", acc), ("sized", sized), ("low", low), ("high", high),
                             ("head", np.arange(first, first + len(acc))), ("value", acc)):
            columns[name].extend(values)
        columns["counts"].extend(counts)
        columns["bits"].extend(np.zeros((len(acc), 0), np.uint8) if bits is None else bits)
        if first == 0 or len(acc) > _INCREMENTAL:
            order = np.lexsort((np.arange(len(self)), -self.acc))
            for name, values in (("order", order), ("sorted_neg", -self.acc[order]),
                                 ("heads_sorted", np.ones(len(order), dtype=bool))):
                columns[name] = Growing(columns[name].view.dtype)
                columns[name].extend(values)
            self.head[:] = np.arange(len(self))
            self._regroup(0)
            return first == 0
        kept = True
        for row in range(first, len(self)):
            kept &= self._insert(row)
        return kept

    def _insert(self, row: int) -> bool:
        """Place the newest row; whether every other row kept its group."""
        a = self.acc[row]
        at = int(np.searchsorted(self.sorted_neg, -a, side="right"))
        self._columns["order"].insert(at, row)
        self._columns["sorted_neg"].insert(at, -a)
        self._columns["heads_sorted"].insert(at, True)
        if self.sized[row]:
            # Heads more than the widest reach above cannot tie with it.
            top = int(np.searchsorted(self.sorted_neg, -(a + self._widest + 1e-9)))
            heads = self.order[top:at][self.heads_sorted[top:at]]
            hit = self._ties(heads, np.int64(row))
            if hit.any():
                self.head[row] = heads[int(np.argmax(hit))]
                self.value[row] = self.acc[self.head[row]]
                self.heads_sorted[at] = False
                return True
        before = self.head[self.order[at + 1:]]
        self._regroup(at)
        return bool(np.array_equal(before, self.head[self.order[at + 1:]]))

    def _regroup(self, start: int) -> None:
        """Redo the groups from sorted position `start` on (rows a head before it took
        stay)."""
        order, n = self.order, len(self.order)
        rest = order[start:]
        if start:
            h = self.head[rest]
            r0 = order[start]
            before = (self.acc[h] > self.acc[r0]) | ((self.acc[h] == self.acc[r0]) & (h < r0))
            self.head[rest[~before]] = rest[~before]
            open_ = np.zeros(n, dtype=bool)
            open_[start:] = ~before
        else:
            self.head[rest] = rest
            open_ = np.ones(n, dtype=bool)
        neg_sorted = self.sorted_neg
        pos = start + int(np.argmax(open_[start:])) if open_[start:].any() else n
        while pos < n:
            open_[pos] = False
            h = int(order[pos])
            if self.sized[h]:
                end = int(np.searchsorted(neg_sorted, -self._reach(h), side="right"))
                among = pos + 1 + np.flatnonzero(open_[pos + 1:end])
                if len(among):
                    members = among[self._ties(np.int64(h), order[among])]
                    self.head[order[members]] = h
                    open_[members] = False
            if pos + 1 >= n or not open_[pos + 1:].any():
                break
            pos = pos + 1 + int(np.argmax(open_[pos + 1:]))
        self.value[rest] = self.acc[self.head[rest]]
        self.heads_sorted[start:] = self.head[rest] == rest

    def _reach(self, h: int) -> float:
        """The lowest accuracy a row tied with head `h` can have."""
        lowest = self.low[h]
        if self.counts[h]:
            lowest = min(lowest, self.acc[h] - float(self.bounds.span(self.acc[h],
                                                                     self.counts[h])))
        return lowest

    def _ties(self, heads: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Elementwise: does each row tie with its head (above it)?"""
        heads, rows = np.broadcast_arrays(np.asarray(heads, np.int64), np.asarray(rows, np.int64))
        out = np.zeros(heads.shape, dtype=bool)
        sized = self.sized[heads] & self.sized[rows]
        pairable = sized & (self.counts[heads] == self.counts[rows]) & (self.counts[heads] > 0)
        wilson = sized & ~pairable
        if wilson.any():
            h, r = heads[wilson], rows[wilson]
            a, b = self.acc[h], self.acc[r]
            out[wilson] = ((self.low[h] <= b) & (b <= self.high[h])
                           & (self.low[r] <= a) & (a <= self.high[r]))
        if pairable.any():
            h, r = self.bits[heads[pairable]], self.bits[rows[pairable]]
            only_head = np.bitwise_count(h & ~r).sum(axis=1, dtype=np.int64)
            only_row = np.bitwise_count(~h & r).sum(axis=1, dtype=np.int64)
            out[pairable] = self.bounds.within(only_head, only_head + only_row)
        return out
