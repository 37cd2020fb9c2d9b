"""The closest tenth of a large population to a point of the front, without measuring all.

Why: each proposal samples among the `top_perc` closest to a random point of the front,
and measuring every distance grows with the study (7 ms of 9.5 at 100,000 candidates).
Here the points are grouped by ranked accuracy ("columns": accuracies count validation
images, so there are few), each sorted by cost; binary searches find a radius holding the
closest k, and only the points inside (with the front's cost twins and the columns' ends)
are measured, with `ParetoCurve.column_weights`' arithmetic (the same bits). Either the
points left out provably rank after the k-th, or `closest` says None and the caller
measures every point.
"""

from __future__ import annotations

import numpy as np

from nas.search.strategy.growing import Growing
from nas.search.strategy.pareto import ParetoCurve


class CostIndex:
    """One cost's points of a pool (rows 0..n-1), grouped by ranked accuracy (`first`,
    descending), each group by standardized cost (`second`), then row; `by_row`: the same
    groups in row order."""

    def __init__(self, first: np.ndarray, second: np.ndarray) -> None:
        order = np.lexsort((np.arange(len(first)), second, -first))
        self._rows, self._second = Growing(np.int64), Growing(float)
        self._rows.extend(order)
        self._by_row = Growing(np.int64)
        self._by_row.extend(np.argsort(-np.asarray(first, dtype=float), kind="stable"))
        self._second.extend(np.asarray(second, dtype=float)[order])
        sorted_first = np.asarray(first, dtype=float)[order]
        cut = np.flatnonzero(np.diff(sorted_first) != 0) + 1
        self.starts = np.concatenate([[0], cut, [len(order)]]).astype(np.int64)
        self.firsts = sorted_first[self.starts[:-1]]
        self._radius = 0.0
        self._make_keys()

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> np.ndarray:
        return self._rows.view

    @property
    def by_row(self) -> np.ndarray:
        return self._by_row.view

    @property
    def second(self) -> np.ndarray:
        return self._second.view

    @property
    def key(self) -> np.ndarray:
        return self._key.view

    def add(self, row: int, first: float, second: float) -> None:
        """Add the newest row (numbered after every other)."""
        c = int(np.searchsorted(-self.firsts, -first, side="left"))
        new_column = c == len(self.firsts) or self.firsts[c] != first
        if new_column:
            self.firsts = np.insert(self.firsts, c, first)
            self.starts = np.insert(self.starts, c, self.starts[c])
        lo, hi = self.starts[c], self.starts[c + 1]
        at = lo + int(np.searchsorted(self.second[lo:hi], second, side="right"))
        self._rows.insert(at, row)
        self._second.insert(at, second)
        self._by_row.insert(hi, row)  # the newest row: last of its group
        self.starts[c + 1:] += 1
        if not self._low <= second <= self._high:
            self._make_keys()
            return
        self._key.insert(at, c * self._span + (second - self._low))
        if new_column:  # the columns after it are numbered one more
            self.key[at + 1:] += self._span

    def closest(self, curve: ParetoCurve, anchor: np.ndarray, normalize: bool, k: int
                ) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Rows (in no order) holding every row among the k lowest selection weights
        (distance to `anchor`, `selection.ranked_behind` applied), their weights and the
        k-th lowest; None when a check fails."""
        n = len(self.rows)
        if not 0 < k < n:
            return None
        scale = curve.normalization() if normalize else np.ones(2)
        a = curve.standardize([anchor])[0] / scale
        dx = self.firsts / scale[0] - a[0]
        reach = np.searchsorted(-curve.curve[:, 0], -self.firsts, side="right")
        ends = self.starts[1:] - 1
        if (reach == 0).any():
            return None
        target = curve.curve[reach - 1, 1]
        if (self.second[ends] > target).any():  # a point beyond the front: not the pool's
            return None
        def column(positions: np.ndarray) -> np.ndarray:
            return np.searchsorted(self.starts, positions, side="right") - 1

        def dist(positions: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
            dxs = dx[column(positions) if columns is None else columns]
            dy = self.second[positions] / scale[1] - a[1]
            return np.sqrt(dxs * dxs + dy * dy)

        lo, hi = self._ranges(dx, a[1], scale[1], k)
        inside = _spans(lo, hi)
        twins = self._twins(target, ends)
        edges = np.concatenate([self.starts[:-1], ends])
        # Rows outside: beyond each range's edge row, whose distance bounds theirs when
        # it lies on the far side of the anchor's cost (distance is unimodal in a column).
        left = lo - 1
        left = left[left >= self.starts[:-1]]
        right = hi[hi <= ends]
        dy_left = self.second[left] / scale[1] - a[1]
        dy_right = self.second[right] / scale[1] - a[1]
        if (dy_left > 0).any() or (dy_right < 0).any():
            return None
        at = np.minimum(np.searchsorted(inside, twins), max(len(inside) - 1, 0))
        extra = twins if not len(inside) else twins[inside[at] != twins]  # `inside` ascends
        chosen = np.concatenate([inside, extra])
        columns = np.concatenate([np.repeat(np.arange(len(lo)), hi - lo), column(extra)])
        w = dist(chosen, columns)
        w_max = float(max(dist(edges).max(), w.max()))
        outside = np.concatenate([dist(left), dist(right)])
        bound = float(outside.min()) if len(outside) else np.inf
        w_min = w.min()
        if not w_min <= bound:
            return None
        beaten = target[columns] > self.second[chosen]
        some_beaten = len(twins) < n
        if some_beaten:
            w = np.where(beaten, w_max + 1.0 + w - w_min, w)
            bound = w_max + 1.0 + bound - w_min
        if len(w) < k:
            return None
        kth = float(np.partition(w, k - 1)[k - 1])
        if not kth < bound:
            return None
        return self.rows[chosen], w, kth

    def most_accurate(self, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Rows holding every row among the k lowest of `best - accuracy`, with those
        weights: whole groups from the most accurate down, until k rows and a strictly
        larger weight after them, in the draw's order where group weights differ."""
        n = len(self.rows)
        if not 0 < k < n:
            return None
        weights = self.firsts[0] - self.firsts  # as `acc.max() - acc`, per group
        c = int(np.searchsorted(self.starts[1:], k, side="left"))  # group of the k-th row
        while c + 1 < len(self.firsts) and weights[c + 1] <= weights[c]:
            c += 1  # rounding made the next group's weight equal: it competes too
        end = self.starts[c + 1]
        groups = np.repeat(np.arange(c + 1), np.diff(self.starts[: c + 2]))
        return self.by_row[:end], weights[groups]

    def _ranges(self, dx: np.ndarray, center: float, scale: float, k: int
                ) -> tuple[np.ndarray, np.ndarray]:
        """Per column, the rows within a radius holding at least k (not many more), by
        bisection from the last radius."""
        def within(r: float) -> tuple[np.ndarray, np.ndarray]:
            half = np.sqrt(np.maximum(r * r - dx * dx, 0.0))
            c = np.arange(len(dx)) * self._span
            lo = np.searchsorted(self.key, c + (scale * (center - half) - self._low), "left")
            hi = np.searchsorted(self.key, c + (scale * (center + half) - self._low), "right")
            lo = np.clip(lo, self.starts[:-1], self.starts[1:])
            hi = np.clip(hi, lo, self.starts[1:])
            return lo, hi

        r, low, high, best = (self._radius or 0.1), 0.0, np.inf, None
        for _ in range(40):
            lo, hi = within(r)
            count = int((hi - lo).sum())
            if count >= k:
                best, high = (lo, hi), r
                if count <= k + k // 4 + 16:
                    break
            else:
                low = r
            r = r * 2.0 if high == np.inf else 0.5 * (low + high)
        self._radius = high if high != np.inf else r
        return best if best is not None else within(np.inf)

    def _twins(self, target: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The rows no strictly cheaper, tied-or-better row beats: per column, those whose
        cost equals the front's at their accuracy."""
        out = []
        for c in np.flatnonzero(self.second[ends] == target):
            p = ends[c]
            while p >= self.starts[c] and self.second[p] == target[c]:
                out.append(p)
                p -= 1
        return np.array(out, dtype=np.int64)

    def _make_keys(self) -> None:
        """One sortable number per row (its column, then its cost), so a binary search per
        column is one `searchsorted`; every row found is still measured exactly."""
        low, high = ((float(self.second.min()), float(self.second.max()))
                     if len(self.second) else (0.0, 1.0))
        width = max(high - low, abs(high), abs(low), 1e-300)
        self._low, self._high = low - width, high + width  # room before a rebuild
        self._span = 2.0 * (self._high - self._low)
        column = np.repeat(np.arange(len(self.firsts)), np.diff(self.starts))
        self._key = Growing(float)
        self._key.extend(column * self._span + (self.second - self._low))


def _spans(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Every position in the ranges [lo, hi)."""
    lengths = hi - lo
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(lo - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return offsets + np.arange(total)
