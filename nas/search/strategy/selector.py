"""Parent selection kept between proposals: the driver's `Selector`, and `select_parents`.

Why a module of its own: `nas.search.strategy.selection` holds the rule's parts (the
config, the population's columns, the weights and the draw); this applies them and keeps
what they compute from one proposal to the next (the pool that reaches `min_acc`, its noise
ties, its fronts, its closest-k indexes) so that a proposal over 100,000 candidates reads
what changed, and draws the same parents as `select_parents` (the rule applied afresh).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nas.search.strategy import constraints as bounds_lib
from nas.search.strategy.closest import CostIndex
from nas.search.strategy.cost_ties import has_spread, tied_values
from nas.search.strategy.growing import Growing
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.selection import (
    COSTS,
    Columns,
    Individual,
    SelectionConfig,
    aged_values,
    draw_weighted,
    higher_better,
    lowest_rows,
    ranked_behind,
    sample_from_weights,
    spread_name,
    top_k,
)
from nas.search.strategy.ties import NoiseTies


class GrowingColumns:
    """`Columns` that rows are appended to, in amortized constant time per row: a column
    per cost of `costs` (the built-in ones and a user's); a cost the rows lack is NaN."""

    def __init__(self, costs: Sequence[str] = COSTS) -> None:
        self._ids = Growing(np.int64)
        self._accuracy = Growing(float)
        self._costs = {c: Growing(float) for c in costs}
        self._examples = Growing(float)
        self._counts = Growing(np.int64)
        self._bits = Growing(np.uint8, width=0)

    def extend(self, rows: Columns) -> None:
        self._ids.extend(rows.ids)
        self._accuracy.extend(rows.accuracy)
        for c, column in self._costs.items():
            column.extend(rows.costs[c] if c in rows.costs else np.full(len(rows), np.nan))
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


class Selector:
    """`select_parents` over a population that grows between calls (the driver's): the
    rows reaching `min_acc` and their noise ties are kept, and a call with the same rows
    plus new ones (by id) only adds those. Same parents as a fresh `select_parents`."""

    def __init__(self, config: SelectionConfig | None = None, closest: bool = True) -> None:
        self.config = config or SelectionConfig()
        self.closest = closest  # keep closest-k indexes (worth it over many calls)
        users = self.config.user_costs
        self._costs = (*COSTS, *users, *map(spread_name, users))  # the pool's columns
        self._seen = np.zeros(0, dtype=np.int64)  # ids of the population last given
        self._pool: GrowingColumns | None = None  # its rows reaching min_acc
        self._ties = NoiseTies()  # of the pool's accuracies (when they do not age)
        # cost -> the pool's front and how many of its rows it covers, while the ranked
        # accuracies of covered rows stay as they were (no aging, no regrouping)
        self._fronts: dict[str, tuple[ParetoCurve, int]] = {}
        # cost -> the pool's points grouped for the closest-k search, kept under the same
        # condition; cost -> how many of the pool's values are missing or not finite
        self._indexes: dict[str, CostIndex] = {}
        self._unusable = dict.fromkeys(self._costs, 0)

    def select(self, population: Sequence[Individual] | Columns,
               rng: np.random.Generator | None, num: int = 1) -> list[int]:
        config = self.config
        if rng is None:
            raise ValueError("rng: pass a numpy.random.Generator so selection is reproducible")
        if not len(population):
            raise ValueError("population: empty; at least one trained candidate is needed")
        pool = self._update(population if isinstance(population, Columns)
                            else Columns.of(population, config.user_costs))
        if not len(pool):
            raise ValueError(f"population: no individual reaches min_acc={config.min_acc}")
        if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= len(pool):
            raise ValueError(f"num: must be an integer in [1, {len(pool)}], got {num!r}")
        acc = self._accuracies(pool)
        violation = (bounds_lib.violations(pool.costs, config.constraints, len(pool))
                     if config.constraints else None)  # of the medians measured
        pool, tied = _with_cost_ties(pool, config.user_costs)

        def front(cost: str) -> ParetoCurve | None:
            return None if cost in tied else self._front(pool, acc, cost)

        def index(cost: str) -> CostIndex | None:
            return None if cost in tied else self._index(pool, acc, cost)

        if violation is not None and not (violation <= 0).all():
            return _draw_constrained(pool, acc, violation, config, rng, num)
        return _draw(pool, acc, config, rng, num, front, index)

    def _update(self, columns: Columns) -> Columns:
        """The pool of `columns`: the kept one plus the rows new since the last call."""
        known = len(self._seen)
        if (self._pool is None or len(columns) < known
                or not (_same_start(columns.ids, self._seen)
                        or np.array_equal(columns.ids[:known], self._seen))):
            self._pool, self._ties, self._fronts, known = None, NoiseTies(), {}, 0
            self._indexes, self._unusable = {}, dict.fromkeys(self._costs, 0)
        new = columns.take(slice(known, None))
        if self.config.min_acc is not None:
            new = new.take(new.accuracy >= self.config.min_acc)
        if self._pool is None:
            self._pool = GrowingColumns(self._costs)
        before = len(self._pool.columns)
        self._pool.extend(new)
        added = self._pool.columns
        for cost in self._costs:
            self._unusable[cost] += int(np.sum(~np.isfinite(added.costs[cost][before:])))
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
                second = _higher_better(pool.costs[cost][before:], cost)
                for row in range(before, len(pool)):
                    index.add(row, float(acc[row]), float(second[row - before]))
        self._seen = columns.ids
        return pool

    def _index(self, pool: Columns, acc: np.ndarray, cost: str) -> CostIndex | None:
        """The pool's closest-k index for `cost`; None where it does not apply (values
        missing or not finite, aging, ties off)."""
        if (not self.closest or self._unusable[cost] or self.config.generations_to_live > 0
                or not self.config.noise_ties):
            return None
        if cost not in self._indexes:
            second = _higher_better(pool.costs[cost], cost)
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
            curve = ParetoCurve(points, (True, higher_better(cost)))
        self._fronts[cost] = (curve, len(pool))
        return curve

    def _accuracies(self, pool: Columns) -> np.ndarray:
        """What the ranking reads: accuracy after aging, tie groups at their head's value."""
        if not self.config.noise_ties:
            return aged_values(pool.ids, pool.accuracy, self.config)
        if self.config.generations_to_live <= 0:
            return self._ties.values()
        ties = NoiseTies()  # aged accuracies change with every newer row: regrouped
        ties.extend(aged_values(pool.ids, pool.accuracy, self.config), pool.examples,
                    pool.correct_bits, pool.correct_counts)
        return ties.values()


def _higher_better(values: np.ndarray, cost: str) -> np.ndarray:
    """`cost`'s values in the front's frame: negated where lower is better."""
    return values * (1.0 if higher_better(cost) else -1.0)


def _same_start(ids: np.ndarray, seen: np.ndarray) -> bool:
    """Whether `ids` starts with `seen` because both view the same buffer from its start
    (the driver's `GrowingColumns`, which only appends): no pass over 100,000 ids."""
    return (ids.base is not None and ids.base is seen.base
            and ids.ctypes.data == seen.ctypes.data and ids.strides == seen.strides)


def _draw(pool: Columns, acc: np.ndarray, config: SelectionConfig,
          rng: np.random.Generator, num: int,
          front: Callable[[str], ParetoCurve] | None = None,
          index: Callable[[str], CostIndex | None] | None = None) -> list[int]:
    """`num` distinct parents, each from the front of accuracy against a cost drawn per
    parent (or from accuracy alone). `front(cost)`: the whole pool's front, if kept;
    `index(cost)`: its closest-k index, if kept (the first parent reads only the rows
    near the anchor; the same parent as measuring every row). Both apply to the whole
    pool only, so not once a parent is taken out of it."""
    chosen: list[int] = []
    alive = np.ones(len(pool), dtype=bool)
    k = top_k(len(pool), config)
    for _ in range(num):
        whole = bool(alive.all())
        row = _draw_row(pool, acc, config, rng, alive, k, front if whole else None,
                        index if whole else None)
        chosen.append(int(pool.ids[row]))
        alive[row] = False
    return chosen


def _draw_row(pool: Columns, acc: np.ndarray, config: SelectionConfig,
              rng: np.random.Generator, alive: np.ndarray, k: int,
              front: Callable[[str], ParetoCurve] | None,
              index: Callable[[str], CostIndex | None] | None) -> int:
    """One parent's row among the `alive` ones (`_draw`)."""
    if rng.random() < config.p_accuracy_only:
        kept = next((found for cost in config.costs if (found := index(cost))
                     is not None), None) if index is not None else None
        found = kept.most_accurate(k) if kept else None
        if found is not None:  # the most accurate groups only
            rows, w = found
            top = lowest_rows(rows, w, k)
            return draw_weighted(rows[top], w[top], rng)
        idx = np.flatnonzero(alive)
        weights = acc.max() - acc[idx]
    else:
        cost = config.costs[int(rng.integers(len(config.costs)))]
        kept = index(cost) if index is not None and front is not None and \
            config.balanced else None
        curve = anchor = None
        if kept is not None:  # the rows near the anchor only, when the checks hold
            curve = front(cost)
            anchor = curve.sample_point(rng)
            found = kept.closest(curve, anchor, config.normalize, k)
            if found is not None:
                rows, w, kth = found
                top = lowest_rows(rows, w, k, kth)
                return draw_weighted(rows[top], w[top], rng)
        values = pool.costs[cost]
        idx = np.flatnonzero(alive & ~np.isnan(values))
        if not len(idx):
            raise ValueError(f"population: no individual has a value for cost {cost!r}")
        first, cost_values = acc[idx], values[idx]
        if not np.isfinite(cost_values).all():
            raise ValueError(f"population: cost {cost!r} must be finite, got "
                             f"{float(cost_values[~np.isfinite(cost_values)][0])}")
        if curve is None:
            curve = front(cost) if front is not None else None
            if curve is None:
                curve = ParetoCurve(np.stack([first, cost_values], axis=1),
                                    (True, higher_better(cost)))
            anchor = curve.sample_point(rng) if config.balanced else None
        # In the curve's frame (accuracy, cost negated when lower is better): exact.
        second = _higher_better(cost_values, cost)
        weights, reach = curve.column_weights(first, second, config.normalize, anchor)
        if config.noise_ties:  # `behind_tied_cheaper`, reusing the reach
            weights = ranked_behind(weights, curve.curve[reach - 1, 1] > second)
    return int(idx[sample_from_weights(np.asarray(weights, dtype=float), config, rng)])


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
def _with_cost_ties(pool: Columns, costs: Sequence[str]) -> tuple[Columns, set[str]]:
    """`pool` with each measured cost that has a spread read as its tie group's best
    (`nas.search.strategy.cost_ties`), and the names of those costs (their fronts and
    indexes are not kept: a new row may regroup old ones)."""
    tied = {}
    for cost in costs:
        spreads = pool.costs.get(spread_name(cost))
        if cost in pool.costs and has_spread(spreads):
            tied[cost] = tied_values(pool.costs[cost], spreads, higher_better(cost))
    if not tied:
        return pool, set()
    return Columns(pool.ids, pool.accuracy, {**pool.costs, **tied}, pool.examples,
                   pool.correct_counts, pool.correct_bits), set(tied)


def _draw_constrained(pool: Columns, acc: np.ndarray, violation: np.ndarray,
                      config: SelectionConfig, rng: np.random.Generator, num: int
                      ) -> list[int]:
    """Parents by constrained domination (Deb's rule), where some rows are infeasible:
    drawn from the feasible rows as from a whole pool, as many as there are; the rest
    (or all, when none is feasible) from the infeasible rows, p ∝ 10^(-normalized
    violation) among the top-k least violating."""
    feasible = violation <= 0
    chosen: list[int] = []
    if feasible.any():
        chosen = _draw(pool.take(feasible), acc[feasible], config, rng,
                       min(num, int(feasible.sum())))
    rest = np.flatnonzero(~feasible)
    weights = bounds_lib.constrained_order(violation[rest], np.zeros(len(rest)))
    while len(chosen) < num:
        at = sample_from_weights(weights, config, rng)
        chosen.append(int(pool.ids[rest[at]]))
        rest, weights = np.delete(rest, at), np.delete(weights, at)
    return chosen
