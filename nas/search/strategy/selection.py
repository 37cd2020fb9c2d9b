"""Parent selection from the accuracy/cost Pareto front (regularized-evolution style).

Each suggestion ranks the population by its signed distance to the Pareto front of
accuracy against one cost objective (or, sometimes, by accuracy alone), keeps the top-k,
and samples a parent with probability proportional to 10^(-normalized weight). Optional
aging discounts the accuracy of old individuals so the search keeps moving; accuracies
that noise cannot tell apart rank as ties (`noise_ties`). Everything
random comes from the caller's `numpy.random.Generator`: the same population and seed
give the same parents.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nas.search.strategy.closest import CostIndex
from nas.search.strategy.growing import Growing
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.ties import NoiseTies

# Objective name -> whether higher is better.
OBJECTIVES: dict[str, bool] = {
    "accuracy": True,
    "flops": False,
    "params": False,
    "im_sec_core_train": True,
    "im_sec_core_infer": True,
}
COSTS = tuple(k for k in OBJECTIVES if k != "accuracy")
AGING_MODES = ("cosine", "step")


def check_cost(cost: str, field: str = "cost") -> str:
    """Validate a cost objective name."""
    if cost not in COSTS:
        raise ValueError(f"{field}: unknown cost objective {cost!r}; expected one of {COSTS}")
    return cost


@dataclasses.dataclass(frozen=True)
class Individual:
    """What selection needs to know about one trained candidate."""

    id: int
    accuracy: float
    flops: float | None = None
    params: float | None = None
    im_sec_core_train: float | None = None
    im_sec_core_infer: float | None = None
    examples: int | None = None  # the accuracy's sample size (validation examples)

    @classmethod
    def from_candidate(cls, candidate: Any) -> Individual:
        """Build from a `nas.search.Candidate` (or anything with the same attributes)."""
        if candidate.accuracy is None:
            raise ValueError(
                f"candidate {candidate.id}: has no accuracy (status "
                f"{getattr(candidate, 'status', '?')!r}); only done ones select"
            )
        return cls(
            id=int(candidate.id),
            accuracy=float(candidate.accuracy),
            **{k: getattr(candidate, k, None) for k in COSTS},
            examples=(getattr(candidate, "extra_metrics", None) or {}).get("val_examples"),
        )


@dataclasses.dataclass(frozen=True)
class Columns:
    """A population as arrays ordered by id, what `select_parents` computes on: a cost
    or sample size that is unknown is NaN. Why: the driver appends to these as results
    come in, so a proposal over 100,000 candidates makes no pass over Python objects."""

    ids: np.ndarray
    accuracy: np.ndarray
    costs: Mapping[str, np.ndarray]
    examples: np.ndarray
    # Per-example validation results, where known: how many examples (0: none) and the
    # packed bits (`nas.io.examples.pack`), one row each; paired noise ties read them.
    correct_counts: np.ndarray | None = None
    correct_bits: np.ndarray | None = None

    @classmethod
    def of(cls, population: Sequence[Individual]) -> Columns:
        """From individuals in any order."""
        pool = sorted(population, key=lambda ind: ind.id)
        return cls(
            np.array([ind.id for ind in pool], dtype=np.int64),
            np.array([ind.accuracy for ind in pool], dtype=float),
            {c: np.array([_number(getattr(ind, c)) for ind in pool], dtype=float)
             for c in COSTS},
            np.array([float(int(ind.examples)) if ind.examples else math.nan
                      for ind in pool], dtype=float))

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, keep: np.ndarray | slice) -> Columns:
        """The rows `keep` selects (a mask or a slice)."""
        return Columns(self.ids[keep], self.accuracy[keep],
                       {c: v[keep] for c, v in self.costs.items()}, self.examples[keep],
                       None if self.correct_counts is None else self.correct_counts[keep],
                       None if self.correct_bits is None else self.correct_bits[keep])


class GrowingColumns:
    """`Columns` that rows are appended to, in amortized constant time per row."""

    def __init__(self) -> None:
        self._ids = Growing(np.int64)
        self._accuracy = Growing(float)
        self._costs = {c: Growing(float) for c in COSTS}
        self._examples = Growing(float)
        self._counts = Growing(np.int64)
        self._bits = Growing(np.uint8, width=0)

    def extend(self, rows: Columns) -> None:
        self._ids.extend(rows.ids)
        self._accuracy.extend(rows.accuracy)
        for c, column in self._costs.items():
            column.extend(rows.costs[c])
        self._examples.extend(rows.examples)
        n = len(rows)
        self._counts.extend(np.zeros(n, np.int64) if rows.correct_counts is None
                            else rows.correct_counts)
        self._bits.extend(np.zeros((n, 0), np.uint8) if rows.correct_bits is None
                          else rows.correct_bits)

    @property
    def columns(self) -> Columns:
        """The rows so far (views, no copy)."""
        return Columns(self._ids.view, self._accuracy.view,
                       {c: v.view for c, v in self._costs.items()}, self._examples.view,
                       self._counts.view, self._bits.view)


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


@dataclasses.dataclass(frozen=True)
class SelectionConfig:
    """Knobs of `select_parents`. Accuracy units are whatever the study stores.

    costs: cost objectives, one drawn uniformly per suggestion.
    p_accuracy_only: chance a suggestion ranks by accuracy alone (distance to the best).
    min_acc: individuals below it are never parents.
    top_n / top_perc / min_to_select: size of the sampled top group: `top_n` if > 0,
        else `int(len * top_perc)`, clamped to [min_to_select, len].
    normalize: scale both objectives by the front's extent before measuring distances.
    balanced: measure distances to a random point of the front (spreads parents along it)
        instead of to the front as a whole.
    generations_to_live: aging horizon in individuals created later (0: no aging).
    warm_up: later individuals that do not count toward age.
    aging: "cosine" (smooth decay between 1x and 2x the horizon) or "step" (drop at it).
    noise_ties: accuracies noise cannot tell apart rank as ties, so the cost objective
        prefers the cheaper once accuracy is matched: two candidates with per-example
        results on the same validation examples tie when their paired comparison is within
        noise (`nas.search.strategy.paired`), others when each accuracy is inside the
        other's 95 % Wilson interval (`nas.search.strategy.ties`).
    noninferiority_pt: the summary's recommendation (not parent selection): a child
        counts as good as the seed when the lower end of its paired 95 % interval of
        child - seed validation accuracy is at least minus this many accuracy points.
    """

    costs: tuple[str, ...] = ("flops", "params")
    p_accuracy_only: float = 0.2
    min_acc: float | None = None
    top_n: int = 0
    top_perc: float = 0.1
    min_to_select: int = 10
    normalize: bool = True
    balanced: bool = True
    generations_to_live: int = 0
    warm_up: int = 0
    aging: str = "cosine"
    noise_ties: bool = True
    noninferiority_pt: float = 1.0

    def __post_init__(self) -> None:
        costs = (self.costs,) if isinstance(self.costs, str) else tuple(self.costs)
        object.__setattr__(self, "costs", costs)
        if not costs:
            raise ValueError("costs: need at least one cost objective")
        for c in costs:
            check_cost(c, "costs")
        if not 0.0 <= self.p_accuracy_only <= 1.0:
            raise ValueError(f"p_accuracy_only: must be in [0, 1], got {self.p_accuracy_only}")
        if not 0.0 < self.top_perc <= 1.0:
            raise ValueError(f"top_perc: must be in (0, 1], got {self.top_perc}")
        for name in ("top_n", "min_to_select", "generations_to_live", "warm_up"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: must be an integer >= 0, got {value!r}")
        if self.min_acc is not None and not math.isfinite(self.min_acc):
            raise ValueError(f"min_acc: must be finite or None, got {self.min_acc}")
        if not isinstance(self.noise_ties, bool):
            raise ValueError(f"noise_ties: must be true or false, got {self.noise_ties!r}")
        margin = self.noninferiority_pt
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not (
                math.isfinite(margin) and 0.0 <= margin <= 100.0):
            raise ValueError(f"noninferiority_pt: must be a number of accuracy points in "
                             f"[0, 100], got {margin!r}")
        if self.aging not in AGING_MODES:
            raise ValueError(f"aging: expected one of {AGING_MODES}, got {self.aging!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> SelectionConfig:
        """Build from a plain dict (e.g. `config.selection.to_dict()`), naming unknown keys."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"selection config: unknown field(s) {unknown}; known: {sorted(known)}"
            )
        return cls(**values)


def age(accuracy: float, alive: int, config: SelectionConfig) -> float:
    """Discount accuracy by age; keeps a tenth so old champions stay comparable."""
    gtl = config.generations_to_live
    if gtl <= 0:
        return accuracy
    if config.aging == "step":
        aged = 0.0 if alive >= gtl else accuracy
    else:
        progress = min(max(alive / gtl - 1.0, 0.0), 1.0)
        aged = accuracy * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 0.1 * accuracy + 0.9 * aged


def aged_accuracies(population: Sequence[Individual] | Columns, config: SelectionConfig
                    ) -> np.ndarray:
    """Accuracy after aging; age = individuals with a larger id (created later) - warm_up."""
    if isinstance(population, Columns):
        ids, accuracy = population.ids, population.accuracy
    else:
        ids = np.array([ind.id for ind in population], dtype=np.int64)
        accuracy = np.array([ind.accuracy for ind in population], dtype=float)
    return _aged(ids, accuracy, config)


def _aged(ids: np.ndarray, accuracy: np.ndarray, config: SelectionConfig) -> np.ndarray:
    """`age` of every individual, in vector steps with `age`'s arithmetic (same bits)."""
    out = np.array(accuracy, dtype=float)
    gtl = config.generations_to_live
    if gtl <= 0 or not len(out):
        return out
    later = len(ids) - np.searchsorted(np.sort(ids), ids, side="right")
    alive = np.maximum(later - config.warm_up, 0)
    if config.aging == "step":
        aged = np.where(alive >= gtl, 0.0, out)
    else:
        progress = np.clip(alive / gtl - 1.0, 0.0, 1.0)
        cos = np.where(progress >= 1.0, math.cos(math.pi), 1.0)
        for i in np.flatnonzero((progress > 0.0) & (progress < 1.0)):  # at most gtl
            cos[i] = math.cos(math.pi * float(progress[i]))
        aged = out * 0.5 * (1.0 + cos)
    return 0.1 * out + 0.9 * aged


def sample_from_weights(
    weights: np.ndarray, config: SelectionConfig, rng: np.random.Generator
) -> int:
    """Index of the chosen one among the top-k lowest weights, p ∝ 10^(-normalized w)."""
    n = len(weights)
    if n == 0:
        raise ValueError("population: nothing to select from")
    top = _lowest(np.asarray(weights), top_k(n, config))
    return _sample(top, weights[top], rng)


def top_k(n: int, config: SelectionConfig) -> int:
    """How many of n the draw samples among."""
    k = config.top_n if config.top_n > 0 else int(n * config.top_perc)
    return min(max(k, config.min_to_select, 1), n)


def _sample(top: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> int:
    """One of `top`, p ∝ 10^(-normalized w)."""
    span = float(w.max() - w.min())
    w = (w - w.min()) / span if span > 0 else np.zeros_like(w)
    p = np.power(10.0, -w)
    return int(rng.choice(top, p=p / p.sum()))


def _lowest(weights: np.ndarray, k: int) -> np.ndarray:
    """`np.argsort(weights, kind="stable")[:k]` without sorting all n: the k-th value by
    partition, then a stable sort of those at or below it."""
    if k >= len(weights):
        return np.argsort(weights, kind="stable")
    kth = np.partition(weights, k - 1)[k - 1]
    below = np.flatnonzero(weights < kth)
    at = np.flatnonzero(weights == kth)[: k - len(below)]
    chosen = np.sort(np.concatenate([below, at]))
    return chosen[np.argsort(weights[chosen], kind="stable")]


def _lowest_rows(rows: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """`_lowest` of rows given in any order: positions (into `rows`) of the k lowest
    weights, by weight, equal weights by row, as `_lowest` orders them by index."""
    kth = np.partition(weights, k - 1)[k - 1]
    below = np.flatnonzero(weights < kth)
    at = np.flatnonzero(weights == kth)
    at = at[np.argsort(rows[at], kind="stable")[: k - len(below)]]
    chosen = np.concatenate([below, at])
    order = np.argsort(weights[chosen])
    ranked = weights[chosen[order]]
    if (ranked[1:] == ranked[:-1]).any():  # equal weights: by row, as `_lowest` orders them
        order = np.lexsort((rows[chosen], weights[chosen]))
    return chosen[order]


def behind_tied_cheaper(weights: np.ndarray, points: Sequence[tuple[float, float]] | np.ndarray,
                        higher_better: bool, curve: ParetoCurve | None = None) -> np.ndarray:
    """`weights` with every point that a tied-or-better, strictly cheaper point dominates
    ranked after all others (still drawable). Why: the front's distance is 0 along its
    flat end, so without this a costlier twin of equal (tied) accuracy ranks as well.
    `curve`: the points' `ParetoCurve(points, (True, higher_better))`, if already made."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    acc = pts[:, 0]
    sign = -1.0 if higher_better else 1.0
    cost = pts[:, 1] * sign
    if not len(acc):
        return weights
    # The cheapest point at least as accurate as each is on the (accuracy, cost) front:
    # the last front point whose accuracy reaches it.
    if curve is None:
        curve = ParetoCurve(pts, (True, higher_better))
    front = curve.points * np.array([1.0, sign])
    reach = np.searchsorted(-front[:, 0], -acc, side="right")
    beaten = front[reach - 1, 1] < cost
    return _behind(weights, beaten)


def _behind(weights: np.ndarray, beaten: np.ndarray) -> np.ndarray:
    """`weights` with the `beaten` ones ranked after all others, in their own order."""
    if not beaten.any() or beaten.all():
        return weights
    return np.where(beaten, weights.max() + 1.0 + weights - weights.min(), weights)


def select_parents(
    population: Sequence[Individual] | Columns,
    config: SelectionConfig | None = None,
    rng: np.random.Generator | None = None,
    num: int = 1,
) -> list[int]:
    """Choose `num` distinct parent ids from the trained population.

    The result depends only on the population (as a set, it is ordered by id here),
    the config and the generator state. `population` may be given as `Columns` (the
    driver keeps them as results come in), so a proposal makes no pass over objects.
    """
    return Selector(config, closest=False).select(population, rng, num)


class Selector:
    """`select_parents` over a population that grows between calls (the driver's): the
    rows reaching `min_acc` and their noise ties are kept, and a call with the same rows
    plus new ones (by id) only adds those. Same parents as a fresh `select_parents`."""

    def __init__(self, config: SelectionConfig | None = None, closest: bool = True) -> None:
        self.config = config or SelectionConfig()
        self.closest = closest  # keep closest-k indexes (worth it over many calls)
        self._seen = np.zeros(0, dtype=np.int64)  # ids of the population last given
        self._pool: GrowingColumns | None = None  # its rows reaching min_acc
        self._ties = NoiseTies()  # of the pool's accuracies (when they do not age)
        # cost -> the pool's front and how many of its rows it covers, while the ranked
        # accuracies of covered rows stay as they were (no aging, no regrouping)
        self._fronts: dict[str, tuple[ParetoCurve, int]] = {}
        # cost -> the pool's points grouped for the closest-k search, kept under the same
        # condition; cost -> how many of the pool's values are missing or not finite
        self._indexes: dict[str, CostIndex] = {}
        self._unusable = dict.fromkeys(COSTS, 0)

    def select(self, population: Sequence[Individual] | Columns,
               rng: np.random.Generator | None, num: int = 1) -> list[int]:
        config = self.config
        if rng is None:
            raise ValueError("rng: pass a numpy.random.Generator so selection is reproducible")
        if not len(population):
            raise ValueError("population: empty; at least one trained candidate is needed")
        pool = self._update(population if isinstance(population, Columns)
                            else Columns.of(population))
        if not len(pool):
            raise ValueError(f"population: no individual reaches min_acc={config.min_acc}")
        if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= len(pool):
            raise ValueError(f"num: must be an integer in [1, {len(pool)}], got {num!r}")
        acc = self._accuracies(pool)
        return _draw(pool, acc, config, rng, num, lambda cost: self._front(pool, acc, cost),
                     lambda cost: self._index(pool, acc, cost))

    def _update(self, columns: Columns) -> Columns:
        """The pool of `columns`: the kept one plus the rows new since the last call."""
        known = len(self._seen)
        if (self._pool is None or len(columns) < known
                or not np.array_equal(columns.ids[:known], self._seen)):
            self._pool, self._ties, self._fronts, known = None, NoiseTies(), {}, 0
            self._indexes, self._unusable = {}, dict.fromkeys(COSTS, 0)
        new = columns.take(slice(known, None))
        if self.config.min_acc is not None:
            new = new.take(new.accuracy >= self.config.min_acc)
        if self._pool is None:
            self._pool = GrowingColumns()
        before = len(self._pool.columns)
        self._pool.extend(new)
        for cost in COSTS:
            self._unusable[cost] += int(np.sum(~np.isfinite(new.costs[cost])))
        kept = self.config.generations_to_live <= 0
        if self.config.noise_ties and kept:
            kept = self._ties.extend(new.accuracy, new.examples, new.correct_bits,
                                     new.correct_counts)
        if not kept:
            self._fronts, self._indexes = {}, {}
        pool = self._pool.columns
        if self._indexes and len(new):
            acc = self._ties.values()
            for cost, index in self._indexes.items():
                second = pool.costs[cost] * (1.0 if OBJECTIVES[cost] else -1.0)
                for row in range(before, len(pool)):
                    index.add(row, float(acc[row]), float(second[row]))
        self._seen = columns.ids
        return pool

    def _index(self, pool: Columns, acc: np.ndarray, cost: str) -> CostIndex | None:
        """The pool's closest-k index for `cost`; None where it does not apply (values
        missing or not finite, aging, ties off)."""
        if (not self.closest or self._unusable[cost] or self.config.generations_to_live > 0
                or not self.config.noise_ties):
            return None
        if cost not in self._indexes:
            second = pool.costs[cost] * (1.0 if OBJECTIVES[cost] else -1.0)
            self._indexes[cost] = CostIndex(acc, second)
        return self._indexes[cost]

    def _front(self, pool: Columns, acc: np.ndarray, cost: str) -> ParetoCurve:
        """The front of (ranked accuracy, cost) over the whole pool: the kept front with the
        rows added since (the same curve as from every point: dropped points stay
        dominated)."""
        values = pool.costs[cost]
        curve, covered = self._fronts.get(cost, (None, 0))
        rows = np.arange(covered, len(pool))
        rows = rows[~np.isnan(values[rows])]
        points = np.stack([acc[rows], values[rows]], axis=1)
        if curve is not None:
            points = np.concatenate([curve.points, points]) if len(rows) else curve.points
        if curve is None or len(rows):
            curve = ParetoCurve(points, (True, OBJECTIVES[cost]))
        self._fronts[cost] = (curve, len(pool))
        return curve

    def _accuracies(self, pool: Columns) -> np.ndarray:
        """What the ranking reads: accuracy after aging, tie groups at their head's value."""
        if not self.config.noise_ties:
            return _aged(pool.ids, pool.accuracy, self.config)
        if self.config.generations_to_live <= 0:
            return self._ties.values()
        ties = NoiseTies()  # aged accuracies change with every newer row: regrouped
        ties.extend(_aged(pool.ids, pool.accuracy, self.config), pool.examples,
                    pool.correct_bits, pool.correct_counts)
        return ties.values()


def _draw(pool: Columns, acc: np.ndarray, config: SelectionConfig,
          rng: np.random.Generator, num: int,
          front: Callable[[str], ParetoCurve] | None = None,
          index: Callable[[str], CostIndex | None] | None = None) -> list[int]:
    """`num` distinct parents, each from the front of accuracy against a cost drawn per
    parent (or from accuracy alone). `front(cost)`: the whole pool's front, if kept;
    `index(cost)`: its closest-k index, if kept (the first parent reads only the rows
    near the anchor; the same parent as measuring every row)."""
    chosen: list[int] = []
    alive = np.ones(len(pool), dtype=bool)
    for _ in range(num):
        if rng.random() < config.p_accuracy_only:
            kept = next((found for cost in config.costs if (found := index(cost))
                         is not None), None) if index is not None and alive.all() else None
            found = kept.most_accurate(top_k(len(pool), config)) if kept else None
            if found is not None:  # the most accurate groups only
                rows, w = found
                top = _lowest_rows(rows, w, top_k(len(pool), config))
                pick = _sample(rows[top], w[top], rng)
                chosen.append(int(pool.ids[pick]))
                alive[pick] = False
                continue
            idx = np.flatnonzero(alive)
            weights = acc.max() - acc[idx]
        else:
            cost = config.costs[int(rng.integers(len(config.costs)))]
            kept = index(cost) if index is not None and front is not None and \
                alive.all() and config.balanced else None
            curve = anchor = None
            if kept is not None:  # the rows near the anchor only, when the checks hold
                curve = front(cost)
                anchor = curve.sample_point(rng)
                k = top_k(len(pool), config)
                found = kept.closest(curve, anchor, config.normalize, k)
                if found is not None:
                    rows, w = found
                    top = _lowest_rows(rows, w, k)
                    pick = _sample(rows[top], w[top], rng)
                    chosen.append(int(pool.ids[pick]))
                    alive[pick] = False
                    continue
            values = pool.costs[cost]
            idx = np.flatnonzero(alive & ~np.isnan(values))
            if not len(idx):
                raise ValueError(f"population: no individual has a value for cost {cost!r}")
            first, cost_values = acc[idx], values[idx]
            if not np.isfinite(cost_values).all():
                raise ValueError(f"population: cost {cost!r} must be finite, got "
                                 f"{float(cost_values[~np.isfinite(cost_values)][0])}")
            if curve is None:
                curve = (front(cost) if front is not None and alive.all() else ParetoCurve(
                    np.stack([first, cost_values], axis=1), (True, OBJECTIVES[cost])))
                anchor = curve.sample_point(rng) if config.balanced else None
            # In the curve's frame (accuracy, cost negated when lower is better): exact.
            second = cost_values * (1.0 if OBJECTIVES[cost] else -1.0)
            weights, reach = curve.column_weights(first, second, config.normalize, anchor)
            if config.noise_ties:  # `behind_tied_cheaper`, reusing the reach
                weights = _behind(weights, curve.curve[reach - 1, 1] > second)
        pick = int(idx[sample_from_weights(np.asarray(weights, dtype=float), config, rng)])
        chosen.append(int(pool.ids[pick]))
        alive[pick] = False
    return chosen
