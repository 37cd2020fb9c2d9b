"""Parent selection from the accuracy/cost Pareto front (regularized-evolution style).

Each suggestion ranks the population by its signed distance to the front of accuracy
against one cost (or, sometimes, by accuracy alone), keeps the top-k, and samples a parent
with probability proportional to 10^(-normalized weight). Optional aging discounts old
individuals so the search keeps moving; accuracies noise cannot tell apart rank as ties.
Every draw comes from the caller's generator: the same population and seed give the same
parents. `select_parents` applies the rule afresh; the driver's `Selector` keeps what it
computes between proposals (pool, ties, fronts, closest-k indexes), so a proposal over
100,000 candidates reads only what changed, and draws the same parents.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nas import schema
from nas.search.strategy import constraints as bounds_lib
from nas.search.strategy.closest import CostIndex
from nas.search.strategy.constraints import check_constraints
from nas.search.strategy.growing import Growing
from nas.search.strategy.noise_ties import NoiseTies
from nas.search.strategy.pareto import Front, ParetoCurve
from nas.stats.cost_ties import has_spread, tied_values

# Objective name -> whether higher is better.
OBJECTIVES: dict[str, bool] = {
    "accuracy": True,
    "flops": False,
    "params": False,
    "im_sec_core_train": True,
    "im_sec_core_infer": True,
}
COSTS = tuple(k for k in OBJECTIVES if k != "accuracy")
# Measured in the worker after training (`search.latency`) and kept in the metrics like a
# user's cost, its spread beside it; a user's cost of that name measures it instead.
LATENCY = "latency_ms"
MEASURED_COSTS = (LATENCY,)
SPREAD_SUFFIX = "_iqr"  # a measured cost's interquartile range, beside it in the metrics
AGING_MODES = ("cosine", "step")
# Metric names a study's record holds besides the `nas.train.Metrics` fields: no user's
# cost may take one.
_STUDY_METRICS = frozenset({*OBJECTIVES, "loss", "epochs", "val_examples", "val_correct",
                            "test_accuracy", "test_loss", "test_examples", "test_correct",
                            "fit_seconds"})
_USER_COST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def higher_better(cost: str) -> bool:
    """Whether more of `cost` is better (`OBJECTIVES`; a user's cost: lower is better)."""
    return OBJECTIVES.get(cost, False)


def check_cost(cost: str, field: str = "cost", user_costs: Sequence[str] = ()) -> str:
    """`cost`, checked to be a built-in cost (`latency_ms` included) or a user's."""
    if cost not in COSTS + MEASURED_COSTS and (not isinstance(cost, str)
                                               or cost not in user_costs):
        named = (f" or the user's costs {tuple(user_costs)} (search.costs)" if user_costs
                 else " (or a user's cost named in search.costs)")
        raise ValueError(f"{field}: unknown cost objective {cost!r}; expected one of the "
                         f"built-in costs {COSTS + MEASURED_COSTS}{named}")
    return cost


def bounded_costs(users: Sequence[str]) -> list[str]:
    """The costs a bound may apply to: every lower-is-better one (throughput is not)."""
    return [c for c in dict.fromkeys((*COSTS, *MEASURED_COSTS, *users)) if not higher_better(c)]


def spread_name(cost: str) -> str:
    """Where a measured cost's spread (its interquartile range) is kept: `<cost>_iqr`."""
    return cost + SPREAD_SUFFIX


def check_user_costs(names: Sequence[str], field: str = "search.costs") -> tuple[str, ...]:
    """The names of a user's costs, each an identifier (a CSV column, a JSON key) that no
    built-in metric has, which it would hide."""
    from nas.train.perf import Metrics  # its fields land in every candidate's metrics

    builtin = _STUDY_METRICS | {f.name for f in dataclasses.fields(Metrics)}
    out = tuple(names)
    for name in out:
        if not isinstance(name, str) or not _USER_COST_NAME.match(name):
            raise ValueError(f"{field}: a cost's name must be an identifier (letters, digits, "
                             f"_), got {name!r}")
        if name in builtin or name.startswith("fit_"):
            raise ValueError(f"{field}: the cost name {name!r} is a built-in metric's; "
                             f"name your cost otherwise (built-in costs: {', '.join(COSTS)})")
    return out


def cost_value(item: Any, cost: str) -> float | None:
    """`cost` of a candidate, `Individual` or population row: a built-in one is an
    attribute, a user's a finite number in its metrics (else None)."""
    if cost in OBJECTIVES:
        return getattr(item, cost, None)
    values = getattr(item, "user_costs", None)
    if not isinstance(values, Mapping):
        values = getattr(item, "extra_metrics", None) or {}
    value = values.get(cost)
    # spelled out, not `schema.Field(float).ok`: reports and the first proposal read every
    # row's costs through here, and a Field per call costs 12x as much
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


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
    # a user's costs (`search.costs`) by name: numbers from the candidate's metrics
    user_costs: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)

    @classmethod
    def from_candidate(cls, candidate: Any, user_costs: Sequence[str] | None = None
                       ) -> Individual:
        """From a `nas.search.Candidate` (or alike); `user_costs`: the user's costs to read
        from its metrics (None: every number there)."""
        if candidate.accuracy is None:
            raise ValueError(
                f"candidate {candidate.id}: has no accuracy (status "
                f"{getattr(candidate, 'status', '?')!r}); only done ones select"
            )
        extra = getattr(candidate, "extra_metrics", None) or {}
        names = extra if user_costs is None else [*user_costs, *map(spread_name, user_costs)]
        found = {n: cost_value(candidate, n) for n in names if n not in OBJECTIVES}
        return cls(
            id=int(candidate.id),
            accuracy=float(candidate.accuracy),
            **{k: getattr(candidate, k, None) for k in COSTS},
            examples=extra.get("val_examples"),
            user_costs={n: v for n, v in found.items() if v is not None},
        )


@dataclasses.dataclass(frozen=True)
class Columns:
    """A population as arrays ordered by id (an unknown cost or sample size: NaN). Why: the
    driver appends to these as results come in, so a proposal makes no pass over objects."""

    ids: np.ndarray
    accuracy: np.ndarray
    costs: Mapping[str, np.ndarray]
    examples: np.ndarray
    # Per-example validation results: how many examples (0: none), packed bits
    # (`nas.io.examples.pack`); paired noise ties read them.
    correct_counts: np.ndarray | None = None
    correct_bits: np.ndarray | None = None

    @classmethod
    def of(cls, population: Sequence[Individual], user_costs: Sequence[str] = ()
           ) -> Columns:
        """From individuals in any order; a column per built-in and per user's cost."""
        pool = sorted(population, key=lambda ind: ind.id)
        return cls(np.array([ind.id for ind in pool], dtype=np.int64),
                   np.array([ind.accuracy for ind in pool], dtype=float),
                   cost_columns(pool, pool_costs(user_costs)),
                   size_column([ind.examples for ind in pool]))

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, keep: np.ndarray | slice) -> Columns:
        return Columns(self.ids[keep], self.accuracy[keep],
                       {c: v[keep] for c, v in self.costs.items()}, self.examples[keep],
                       None if self.correct_counts is None else self.correct_counts[keep],
                       None if self.correct_bits is None else self.correct_bits[keep])


def pool_costs(user_costs: Sequence[str]) -> tuple[str, ...]:
    """The cost columns of a pool: the built-in costs, the user's and their spreads."""
    return (*COSTS, *user_costs, *map(spread_name, user_costs))


def cost_columns(items: Sequence[Any], costs: Sequence[str]) -> dict[str, np.ndarray]:
    """Each of `costs` of `items` as a float column (`cost_value`; none: NaN)."""
    return {c: np.array([math.nan if (v := cost_value(item, c)) is None else v
                         for item in items], dtype=float) for c in costs}


def spreads_of(items: Sequence[Any], cost: str) -> np.ndarray | None:
    """The spread of a measured `cost` of each of `items` (`<cost>_iqr`, NaN where none),
    for a front to tie by (`pareto.front_rows`); None for a built-in cost, which has none."""
    if cost in COSTS:
        return None
    return cost_columns(items, (spread_name(cost),))[spread_name(cost)]


def size_column(sizes: Sequence[Any]) -> np.ndarray:
    """Sample sizes as selection reads them (`int(n)`), NaN where unknown (falsy)."""
    return np.array([float(int(n)) if n else math.nan for n in sizes], dtype=float)


@dataclasses.dataclass(frozen=True)
class SelectionConfig(schema.Section):
    """Knobs of `select_parents`. Accuracy units are whatever the study stores.

    costs: cost objectives, one drawn uniformly per suggestion (built-in or a user's).
    p_accuracy_only: chance a suggestion ranks by accuracy alone (distance to the best).
    min_acc: individuals below it are never parents.
    top_n / top_perc / min_to_select: size of the sampled top group: `top_n` if > 0,
        else `int(len * top_perc)`, clamped to [min_to_select, len].
    normalize: scale both objectives by the front's extent before measuring distances.
    balanced: measure distances to a random point of the front (spreads parents along it).
    generations_to_live: aging horizon in individuals created later (0: no aging).
    warm_up: later individuals that do not count toward age.
    aging: "cosine" (smooth decay between 1x and 2x the horizon) or "step" (drop at it).
    noise_ties: accuracies noise cannot tell apart rank as ties, so the cost decides
        (`nas.search.strategy.noise_ties`: McNemar's exact test where both have per-example
        results on the same examples, else each inside the other's Wilson interval).
    noninferiority_pt: for the recommendation, not selection: a candidate is as good as
        the reference when the lower end of its paired 95 % interval (Tango's) of the
        validation accuracy difference is at least minus this many points
        (`nas.search.strategy.recommend`).
    recommend_cost: the cost the recommendation minimizes among non-inferior children.
    user_costs: the user's own costs (`search.costs`, lower is better), given to
        `from_dict` by the search section; `latency_ms` joins them where named.
    constraints: {cost: upper bound} (`search.constraints`): parents are drawn by
        constrained domination (`nas.search.strategy.constraints`).
    """

    costs: tuple[str, ...] = schema.setting(("flops", "params"), None)
    p_accuracy_only: float = schema.setting(0.2, schema.fraction())
    min_acc: float | None = schema.setting(None, schema.Field(float, nullable=True))
    top_n: int = schema.setting(0, schema.at_least(0))
    top_perc: float = schema.setting(0.1, schema.Field(float, low=0, low_open=True, high=1))
    min_to_select: int = schema.setting(10, schema.at_least(0))
    # unchecked: any value has been taken for its truth, so a stored study's still opens
    normalize: bool = schema.setting(True, None)
    balanced: bool = schema.setting(True, None)
    generations_to_live: int = schema.setting(0, schema.at_least(0))
    warm_up: int = schema.setting(0, schema.at_least(0))
    aging: str = schema.setting("cosine", schema.one_of(*AGING_MODES))
    noise_ties: bool = schema.setting(True, schema.Field(bool))
    noninferiority_pt: float = schema.setting(
        1.0, schema.Field(float, low=0, high=100, expected="(accuracy points)"))
    recommend_cost: str = schema.setting("flops", None)
    user_costs: tuple[str, ...] = ()
    constraints: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)

    def check_section(self, prefix: str) -> None:
        """The costs named: built-in ones or the user's; errors name `prefix`'s section."""
        section = f"{prefix.rstrip('.')}: " if prefix else ""
        costs = (self.costs,) if isinstance(self.costs, str) else tuple(self.costs)
        object.__setattr__(self, "costs", costs)
        named = {*costs, self.recommend_cost, *dict(self.constraints or {})}
        users = check_user_costs(self.user_costs, f"{section}user_costs")
        users += tuple(m for m in MEASURED_COSTS if m in named and m not in users)
        object.__setattr__(self, "user_costs", users)
        object.__setattr__(self, "constraints", check_constraints(
            self.constraints, bounded_costs(users), f"{section}constraints"))
        if not costs:
            raise ValueError(f"{section}costs: need at least one cost objective")
        for cost in costs:
            check_cost(cost, f"{section}costs", users)
        check_cost(self.recommend_cost, f"{section}recommend_cost", users)


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


def aged_values(ids: np.ndarray, accuracy: np.ndarray, config: SelectionConfig) -> np.ndarray:
    """`age` of every individual, vectorized with `age`'s arithmetic (the same bits); its age:
    the individuals with a larger id (created later), less `warm_up`."""
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
    top = lowest_rows(np.arange(n), np.asarray(weights), top_k(n, config))
    return draw_weighted(top, weights[top], rng)


def top_k(n: int, config: SelectionConfig) -> int:
    """How many of n the draw samples among."""
    k = config.top_n if config.top_n > 0 else int(n * config.top_perc)
    return min(max(k, config.min_to_select, 1), n)


def draw_weighted(top: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> int:
    """One of `top`, p ∝ 10^(-normalized w): `Generator.choice(top, p=p)`'s arithmetic (one
    uniform draw) without its checks of `p`, sound here, which cost 0.1 ms per 10,000 rows."""
    span = float(w.max() - w.min())
    w = (w - w.min()) / span if span > 0 else np.zeros_like(w)
    p = np.power(10.0, -w)
    cdf = np.cumsum(p / p.sum())
    cdf /= cdf[-1]
    return int(top[np.searchsorted(cdf, rng.random(), side="right")])


def lowest_rows(rows: np.ndarray, weights: np.ndarray, k: int, kth: float | None = None
                 ) -> np.ndarray:
    """Positions (into `rows`) of the k lowest weights, equal weights by row:
    `np.lexsort((rows, weights))[:k]` without sorting them all (the k-th weight by
    partition unless `kth` gives it). The stable sort is fast on runs, as the closest-k
    index gives them (each accuracy group's rows by cost)."""
    if kth is None:
        kth = np.partition(weights, k - 1)[k - 1]
    keep = weights < kth
    at = np.flatnonzero(weights == kth)
    need = k - int(keep.sum())
    keep[at[np.argsort(rows[at], kind="stable")[:need]] if need < len(at) else at] = True
    chosen = np.flatnonzero(keep)
    order = np.argsort(weights[chosen], kind="stable")
    ranked, by_row = weights[chosen[order]], rows[chosen[order]]
    equal = ranked[1:] == ranked[:-1]
    if (by_row[1:][equal] < by_row[:-1][equal]).any():  # equal weights: by row
        order = np.lexsort((rows[chosen], weights[chosen]))
    return chosen[order]


def behind_tied_cheaper(weights: np.ndarray, points: Sequence[tuple[float, float]] | np.ndarray,
                        higher_better: bool, curve: ParetoCurve | None = None) -> np.ndarray:
    """`weights` with every point that a tied-or-better, strictly cheaper point dominates
    ranked after all others. Why: the front's distance is 0 along its flat end, so a
    costlier twin of tied accuracy would rank as well. `curve`: the points' front, if made."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    acc = pts[:, 0]
    sign = -1.0 if higher_better else 1.0
    cost = pts[:, 1] * sign
    if not len(acc):
        return weights
    # the cheapest point at least as accurate: the last front point reaching its accuracy
    if curve is None:
        curve = ParetoCurve(pts, (True, higher_better))
    front = curve.points * np.array([1.0, sign])
    reach = np.searchsorted(-front[:, 0], -acc, side="right")
    beaten = front[reach - 1, 1] < cost
    return ranked_behind(weights, beaten)


def ranked_behind(weights: np.ndarray, beaten: np.ndarray) -> np.ndarray:
    """`weights` with the `beaten` ones ranked after the others, in their own order."""
    if not beaten.any() or beaten.all():
        return weights
    return np.where(beaten, weights.max() + 1.0 + weights - weights.min(), weights)


class GrowingColumns:
    """`Columns` appended to in amortized constant time per row; a cost of `costs` that
    the rows lack is NaN."""

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
    """`select_parents` over a population that grows between calls: a call with the same
    rows plus new ones (by id) only adds those. Same parents as a fresh `select_parents`."""

    def __init__(self, config: SelectionConfig | None = None, closest: bool = True) -> None:
        self.config = config or SelectionConfig()
        self.closest = closest  # keep closest-k indexes (worth it over many calls)
        self._costs = pool_costs(self.config.user_costs)  # the pool's columns
        self._seen = np.zeros(0, dtype=np.int64)  # ids of the population last given
        self._pool: GrowingColumns | None = None  # its rows reaching min_acc
        self._ties = NoiseTies()  # of the pool's accuracies (when they do not age)
        # cost -> the pool's front and how many of its rows it covers, while the ranked
        # accuracies of covered rows stay as they were (no aging, no regrouping)
        self._fronts: dict[str, tuple[Front, int]] = {}
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
        """The pool's closest-k index for `cost`; None where it does not apply."""
        if (not self.closest or self._unusable[cost] or self.config.generations_to_live > 0
                or not self.config.noise_ties):
            return None
        if cost not in self._indexes:
            second = _higher_better(pool.costs[cost], cost)
            self._indexes[cost] = CostIndex(acc, second)
        return self._indexes[cost]

    def _front(self, pool: Columns, acc: np.ndarray, cost: str) -> ParetoCurve:
        """The front of (ranked accuracy, cost) over the whole pool: the kept front with the
        rows added since."""
        front, covered = self._fronts.get(cost) or (Front(higher_better(cost)), 0)
        front.extend(acc[covered:], pool.costs[cost][covered:])
        self._fronts[cost] = (front, len(pool))
        return front.curve()

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
    """Whether `ids` starts with `seen` because both view one buffer from its start (the
    driver's `GrowingColumns` only appends): no pass over 100,000 ids."""
    return (ids.base is not None and ids.base is seen.base
            and ids.ctypes.data == seen.ctypes.data and ids.strides == seen.strides)


def _draw(pool: Columns, acc: np.ndarray, config: SelectionConfig,
          rng: np.random.Generator, num: int,
          front: Callable[[str], ParetoCurve] | None = None,
          index: Callable[[str], CostIndex | None] | None = None) -> list[int]:
    """`num` distinct parents, each from the front of accuracy against a cost drawn per
    parent (or from accuracy alone). `front(cost)`, `index(cost)`: the whole pool's kept
    front and closest-k index, so not used once a parent is taken out of it."""
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
        kept = index(cost) if index is not None and config.balanced else None
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
    """`num` distinct parent ids from the trained population (`Individual`s or `Columns`).

    The result depends only on the population as a set, the config and the generator state.
    """
    return Selector(config, closest=False).select(population, rng, num)
def _with_cost_ties(pool: Columns, costs: Sequence[str]) -> tuple[Columns, set[str]]:
    """`pool` with each measured cost that has a spread read as its tie group's best
    (`cost_ties`), and those costs' names (not kept: a new row may regroup old ones)."""
    tied = {}
    for cost in costs:
        spreads = pool.costs.get(spread_name(cost))
        if cost in pool.costs and has_spread(spreads):
            tied[cost] = tied_values(pool.costs[cost], spreads, higher_better(cost))
    if not tied:
        return pool, set()
    return dataclasses.replace(pool, costs={**pool.costs, **tied}), set(tied)


def _draw_constrained(pool: Columns, acc: np.ndarray, violation: np.ndarray,
                      config: SelectionConfig, rng: np.random.Generator, num: int
                      ) -> list[int]:
    """Parents by Deb's rule, some rows infeasible: from the feasible rows as from a whole
    pool, as many as there are; the rest from the infeasible ones, p ∝ 10^(-normalized
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
