"""The tie groups of a population: which candidates' accuracies noise cannot tell apart.

From the most accurate down (equal accuracies by row), each row not yet grouped heads a
group and takes every ungrouped row below it that it ties with. Two rows tie when both have
per-example validation results on the same examples and McNemar's exact test
(`nas.stats.paired.mcnemar`) does not reject; otherwise when both sizes are known and each
accuracy lies inside the other's 95 % Wilson interval (`nas.stats.intervals`). A row of
unknown size is never grouped. Selection reads each row's accuracy as its head's, so a cost
decides between candidates noise cannot separate.

Why kept incrementally: the study only grows, and a new row joins the first head above it
that it ties with, which changes nothing else; only a row that ties with no head above it
starts a group and regroups the rows below it. So a proposal over 100,000 candidates costs
a pass over the heads, not a regrouping of the population.
"""

from __future__ import annotations

import numpy as np

from nas.search.strategy.growing import Growing
from nas.stats.intervals import Z95, wilson_arrays
from nas.stats.paired import McNemarBounds

# Rows inserted one by one up to this many at a time; a larger batch regroups all.
_INCREMENTAL = 64


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
