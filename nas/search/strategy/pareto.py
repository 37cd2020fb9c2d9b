"""Pareto front of two objectives, and each point's signed distance to it: 0 on the front,
positive behind it, negative beyond it. Internally every objective is "standardized" so
that higher is better (a lower-better objective is negated).

Every front of the search is found here: `ParetoCurve` (the curve's points and the
distances selection ranks by), `front_rows` (the rows on it, ties included: the store's,
the report's and the dashboard's fronts) and `Front` (a front of rows that only grow,
kept between calls: the selector's, the driver's progress line, the report's progress).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from nas.stats.cost_ties import has_spread, tied_values

ArrayLike = Sequence[Sequence[float]] | np.ndarray


def as_points(points: ArrayLike, field: str = "points") -> np.ndarray:
    """Validate and convert to a float array of shape (n, 2)."""
    try:
        arr = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{field}: expected a sequence of (x, y) numbers ({e})") from e
    if arr.size == 0:
        return arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{field}: expected shape (n, 2), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{field}: every coordinate must be finite, got {arr.tolist()}")
    return arr


class ParetoCurve:
    """The non-dominated points of a set, from best-first to best-second objective (of
    equal points, one); `higher_better[i]`: whether objective i is maximized."""

    def __init__(self, points: ArrayLike, higher_better: tuple[bool, bool] = (True, True)):
        pts = as_points(points)
        if len(pts) == 0:
            raise ValueError("points: empty; a Pareto curve needs at least one point")
        if len(higher_better) != 2:
            raise ValueError(f"higher_better: expected two booleans, got {higher_better!r}")
        self.higher_better = (bool(higher_better[0]), bool(higher_better[1]))
        self._signs = np.array([1.0 if hb else -1.0 for hb in self.higher_better])
        std = pts * self._signs
        keep = _on_curve(std, _may_be_on_curve(std))
        self.indices = keep.astype(np.int64)
        """Indices (into the input) of the points on the curve, in curve order."""
        self.curve = std[keep]
        """Curve points, standardized (higher is better in both coordinates)."""

    @property
    def points(self) -> np.ndarray:
        """Curve points in the caller's orientation."""
        return self.curve * self._signs

    def standardize(self, points: ArrayLike) -> np.ndarray:
        """Map points into the higher-is-better frame of the curve."""
        return as_points(points) * self._signs

    def normalization(self) -> np.ndarray:
        """Per-objective scale, so both weigh alike: the curve's extent ((1, 1) when it is
        one point or flat in either objective)."""
        if len(self.curve) <= 1:
            return np.ones(2)
        extent = np.abs(self.curve[-1] - self.curve[0])
        if np.any(extent == 0):
            return np.ones(2)
        return extent

    def holds(self, points: ArrayLike) -> np.ndarray:
        """Whether each point is one of the curve's (a row tied with a front point)."""
        std = self.standardize(points)
        reach = np.searchsorted(-self.curve[:, 0], -std[:, 0], side="right")
        at = self.curve[np.maximum(reach - 1, 0)]
        return (reach > 0) & (at[:, 0] == std[:, 0]) & (at[:, 1] == std[:, 1])

    def dominated(self, points: ArrayLike) -> np.ndarray:
        """Whether each point is weakly dominated by some curve point."""
        std = self.standardize(points)
        # the curve points at least as good in the first are a prefix, best in the second last
        reach = np.searchsorted(-self.curve[:, 0], -std[:, 0], side="right")
        return (reach > 0) & (self.curve[np.maximum(reach - 1, 0), 1] >= std[:, 1])

    def weights(
        self, points: ArrayLike, normalize: bool = True, anchor: Sequence[float] | None = None
    ) -> np.ndarray:
        """Signed distance of each point to the front; lower is better.

        Without an anchor: behind the front, the distance to the curve's segments plus a ray
        down from the best-first end and one back from the best-second end; beyond it, minus
        the distance to the region it dominates (more negative further out). With an anchor
        (caller's orientation, e.g. `sample_point`'s): the distance to it, negated beyond
        the front. `normalize` divides by `normalization()` first.
        """
        std = self.standardize(points)
        if len(std) == 0:
            return np.zeros(0)
        return self.column_weights(std[:, 0].copy(), std[:, 1].copy(), normalize, anchor)[0]

    def column_weights(self, first: np.ndarray, second: np.ndarray, normalize: bool = True,
                       anchor: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`weights` of standardized, finite columns (fewer passes, the same bits), and each
        point's reach (how many curve points are at least as good in the first)."""
        scale = self.normalization() if normalize else np.ones(2)
        reach = np.searchsorted(-self.curve[:, 0], -first, side="right")
        beyond = ~((reach > 0) & (self.curve[np.maximum(reach - 1, 0), 1] >= second))
        if anchor is not None:
            a = self.standardize([anchor])[0] / scale
            dx = first / scale[0] - a[0]
            dy = second / scale[1] - a[1]
            dist = np.sqrt(dx * dx + dy * dy)
            return np.where(beyond, -dist, dist), reach
        p = np.stack([first, second], axis=1) / scale
        curve = self.curve / scale
        behind = _distance_to_polyline(p, curve)
        ahead = _distance_to_dominated_region(p, curve)
        return np.where(beyond, -ahead, behind), reach

    def sample_point(self, rng: np.random.Generator) -> np.ndarray:
        """A uniform point on a uniformly chosen segment (caller's orientation)."""
        if len(self.curve) == 1:
            return self.points[0].copy()
        i = int(rng.integers(len(self.curve) - 1))
        t = float(rng.random())
        std = self.curve[i] + t * (self.curve[i + 1] - self.curve[i])
        return std * self._signs


def front_rows(accuracy: np.ndarray, values: np.ndarray, higher_better: bool = False,
               spreads: np.ndarray | None = None) -> np.ndarray:
    """Positions of the rows on the front of accuracy against a cost (`higher_better`:
    the cost's direction), ties with a front point included, the most accurate first and
    equal points by position; a row without a finite value in both is never on it. With
    `spreads` (a measured cost's, `<cost>_iqr`), values within them are ties
    (`cost_ties`), as selection ranks them."""
    accuracy = np.asarray(accuracy, dtype=float)
    values = np.asarray(values, dtype=float)
    if has_spread(spreads):
        values = tied_values(values, spreads, higher_better)
    rows = np.flatnonzero(np.isfinite(accuracy) & np.isfinite(values))
    if not len(rows):
        return rows
    points = np.stack([accuracy[rows], values[rows]], axis=1)
    on = rows[ParetoCurve(points, (True, higher_better)).holds(points)]
    return on[np.lexsort((on, -accuracy[on]))]


class Front:
    """The accuracy/cost front of rows added over time, and how many rows lie on it (ties
    with a front point count). Why kept: a row off the front never returns to it, so
    adding one costs a binary search, not a pass over every row. Its points are kept
    higher-is-better in both, by cost ascending, so accuracy descends along them."""

    def __init__(self, higher_better: bool = False) -> None:
        self._sign = 1.0 if higher_better else -1.0
        self._second: list[float] = []  # ascending
        self._first: list[float] = []  # descending: accuracy
        self._count: list[int] = []  # rows at each point
        self.size = 0
        self._curve: ParetoCurve | None = None  # of the points, until one changes

    def add(self, accuracy: float, cost: float) -> None:
        a, b = float(accuracy), self._sign * float(cost)
        i = bisect.bisect_left(self._second, b)
        if i < len(self._second) and self._first[i] >= a:  # the best-accuracy point at or
            if self._first[i] == a and self._second[i] == b:  # past this cost
                self._count[i] += 1
                self.size += 1
            return  # dominated
        j = bisect.bisect_right(self._second, b)
        while j > 0 and self._first[j - 1] <= a:  # the points the new one dominates
            j -= 1
            self.size -= self._count[j]
            del self._second[j], self._first[j], self._count[j]
        self._second.insert(j, b)
        self._first.insert(j, a)
        self._count.insert(j, 1)
        self.size += 1
        self._curve = None

    def extend(self, accuracy: np.ndarray, values: np.ndarray) -> None:
        """Add rows (a NaN value: skipped). Only those on the front of the kept points
        and them can stay, so only those are added one by one."""
        accuracy = np.asarray(accuracy, dtype=float)
        values = np.asarray(values, dtype=float)
        rows = np.flatnonzero(~np.isnan(values))
        if len(rows) > 1:
            kept = np.reshape(self.points, (-1, 2))
            both = np.concatenate([kept, np.stack([accuracy[rows], values[rows]], axis=1)])
            on = ParetoCurve(both, (True, self._sign > 0)).holds(both)
            rows = rows[on[len(kept):]]
        for row in rows.tolist():
            self.add(accuracy[row], values[row])

    def copy(self) -> Front:
        out = Front(self._sign > 0)
        out._second, out._first, out._count = (list(self._second), list(self._first),
                                               list(self._count))
        out.size, out._curve = self.size, self._curve
        return out

    @property
    def points(self) -> list[tuple[float, float]]:
        """The front's (accuracy, cost) points, the most accurate first."""
        return [(a, self._sign * b) for a, b in zip(self._first, self._second, strict=True)]

    def curve(self) -> ParetoCurve:
        """The front as a `ParetoCurve` (the same as one of every row added)."""
        if self._curve is None:
            self._curve = ParetoCurve(self.points, (True, self._sign > 0))
        return self._curve


def _on_curve(std: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Indices of the curve's points in order: by descending first (then second, then
    index), each kept when its second beats all before it; `among` holds every candidate."""
    sub = std[among]
    order = among[np.lexsort((-sub[:, 1], -sub[:, 0]))]
    second = std[order, 1]
    before = np.maximum.accumulate(np.concatenate([[-np.inf], second[:-1]]))
    return order[second > before]


def _may_be_on_curve(std: np.ndarray) -> np.ndarray:
    """Ascending indices of the points no probe point comes before and weakly dominates.
    Why: a few linear passes against likely front points (an even sample's) leave few to
    sort, instead of n log n per proposal; the curve is the same."""
    rest = np.arange(len(std))
    if len(rest) <= 512:
        return rest
    probes = [int(np.argmax(std[:, 0])), int(np.argmax(std[:, 1]))]
    for round_ in range(2):
        for j in probes:
            s = std[rest]
            better = (s[:, 0] <= std[j, 0]) & (s[:, 1] <= std[j, 1])
            # j comes first unless it equals the point with a larger index
            same = (s[:, 0] == std[j, 0]) & (s[:, 1] == std[j, 1]) & (rest <= j)
            rest = rest[~(better & ~same)]
        if round_ or len(rest) <= 512:
            return rest
        probes = [int(i) for i in _on_curve(std, rest[:: len(rest) // 256])]
    return rest


def _distance_to_polyline(p: np.ndarray, curve: np.ndarray) -> np.ndarray:
    """Distance from each point to the front drawn as segments plus its two end rays."""
    first, last = curve[0], curve[-1]
    down = np.where(
        p[:, 1] <= first[1], np.abs(p[:, 0] - first[0]), np.linalg.norm(p - first, axis=1)
    )
    back = np.where(p[:, 0] <= last[0], np.abs(p[:, 1] - last[1]), np.linalg.norm(p - last, axis=1))
    best = np.minimum(down, back)
    for a, b in zip(curve[:-1], curve[1:], strict=True):
        d = b - a
        t = np.clip(((p - a) @ d) / float(d @ d), 0.0, 1.0)
        foot = a + t[:, None] * d
        best = np.minimum(best, np.linalg.norm(p - foot, axis=1))
    return best


def _distance_to_dominated_region(p: np.ndarray, curve: np.ndarray) -> np.ndarray:
    """Distance from each point to the union of the quadrants below-left of curve points."""
    excess = np.maximum(p[:, None, :] - curve[None, :, :], 0.0)
    return np.min(np.linalg.norm(excess, axis=2), axis=1)


def hypervolume(points: ArrayLike, reference: Sequence[float],
                higher_better: tuple[bool, bool] = (True, False)) -> float:
    """Area dominated by `points` and bounded by `reference`; points not beating it in both
    objectives add nothing. With (0, c): the area under the staircase left of cost c."""
    pts = as_points(points)
    ref = as_points([reference], "reference")[0]
    signs = np.array([1.0 if hb else -1.0 for hb in higher_better])
    std = pts * signs
    r = ref * signs
    std = std[(std[:, 0] > r[0]) & (std[:, 1] > r[1])]
    if len(std) == 0:
        return 0.0
    curve = ParetoCurve(std, (True, True)).curve  # descending first, ascending second
    area, last_second = 0.0, r[1]
    for first, second in curve:
        area += (first - r[0]) * (second - last_second)
        last_second = second
    return float(area)
