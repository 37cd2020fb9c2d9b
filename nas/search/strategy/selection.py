"""Parent selection from the accuracy/cost Pareto front (regularized-evolution style).

Each suggestion ranks the population by its signed distance to the Pareto front of
accuracy against one cost objective (or, sometimes, by accuracy alone), keeps the top-k,
and samples a parent with probability proportional to 10^(-normalized weight). Optional
aging discounts the accuracy of old individuals so the search keeps moving; accuracies
that noise cannot tell apart rank as ties (`noise_ties`). Everything
random comes from the caller's `numpy.random.Generator`: the same population and seed
give the same parents. This module holds the rule's parts (the config, the population's
columns, the weights, the draw); `selector.select_parents` applies it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.search.strategy.constraints import check_constraints
from nas.search.strategy.pareto import ParetoCurve

# Objective name -> whether higher is better.
OBJECTIVES: dict[str, bool] = {
    "accuracy": True,
    "flops": False,
    "params": False,
    "im_sec_core_train": True,
    "im_sec_core_infer": True,
}
COSTS = tuple(k for k in OBJECTIVES if k != "accuracy")
# A built-in cost measured in the worker after training (`search.latency`), kept in the
# candidate's metrics like a user's cost, with its spread under `<name>_iqr`: lower is
# better, and measured only when a front, a bound or the recommendation reads it. A
# user's cost of that name (`search.costs`) measures it instead (on their device).
LATENCY = "latency_ms"
MEASURED_COSTS = (LATENCY,)
SPREAD_SUFFIX = "_iqr"  # a measured cost's interquartile range, beside it in the metrics
AGING_MODES = ("cosine", "step")
# Metric names a candidate's record holds besides the `nas.train.Metrics` fields (the
# study's renamed ones): a user's cost (`search.costs`) may take none of them.
_STUDY_METRICS = frozenset({*OBJECTIVES, "loss", "epochs", "val_examples", "val_correct",
                            "test_accuracy", "test_loss", "test_examples", "test_correct",
                            "fit_seconds"})
_USER_COST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def higher_better(cost: str) -> bool:
    """Whether more of `cost` is better: a built-in's direction (`OBJECTIVES`); a user's
    cost (any other name, `search.costs`) is lower-is-better."""
    return OBJECTIVES.get(cost, False)


def check_cost(cost: str, field: str = "cost", user_costs: Sequence[str] = ()) -> str:
    """Validate a cost objective name: a built-in cost (`latency_ms` included) or one of
    `user_costs`."""
    if cost not in COSTS + MEASURED_COSTS and (not isinstance(cost, str)
                                               or cost not in user_costs):
        named = (f" or the user's costs {tuple(user_costs)} (search.costs)" if user_costs
                 else " (or a user's cost named in search.costs)")
        raise ValueError(f"{field}: unknown cost objective {cost!r}; expected one of the "
                         f"built-in costs {COSTS + MEASURED_COSTS}{named}")
    return cost


def spread_name(cost: str) -> str:
    """Where a measured cost's spread (its interquartile range) is kept: `<cost>_iqr`."""
    return cost + SPREAD_SUFFIX


def check_user_costs(names: Sequence[str], field: str = "search.costs") -> tuple[str, ...]:
    """The names of a user's costs, each an identifier (a CSV column, a JSON key) that no
    built-in metric has: a cost called "loss" or "flops" would hide the measured one."""
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
    """`cost` of a candidate (a `Candidate`, an `Individual`, a population row): a built-in
    cost is an attribute; a user's is a number in its metrics (None when absent)."""
    if cost in OBJECTIVES:
        return getattr(item, cost, None)
    values = getattr(item, "user_costs", None)
    if not isinstance(values, Mapping):
        values = getattr(item, "extra_metrics", None) or {}
    value = values.get(cost)
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
        """Build from a `nas.search.Candidate` (or anything with the same attributes).
        `user_costs`: the names of a user's costs to read from its metrics (None: every
        number there, so a selection by any of them finds it)."""
        if candidate.accuracy is None:
            raise ValueError(
                f"candidate {candidate.id}: has no accuracy (status "
                f"{getattr(candidate, 'status', '?')!r}); only done ones select"
            )
        extra = getattr(candidate, "extra_metrics", None) or {}
        names = extra if user_costs is None else user_costs
        names = [*names, *(spread_name(n) for n in names)] if user_costs is not None \
            else names
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
    def of(cls, population: Sequence[Individual], user_costs: Sequence[str] = ()
           ) -> Columns:
        """From individuals in any order; a column per built-in cost and per name of
        `user_costs`."""
        pool = sorted(population, key=lambda ind: ind.id)
        return cls(
            np.array([ind.id for ind in pool], dtype=np.int64),
            np.array([ind.accuracy for ind in pool], dtype=float),
            {c: np.array([_number(cost_value(ind, c)) for ind in pool], dtype=float)
             for c in (*COSTS, *user_costs, *map(spread_name, user_costs))},
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


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


@dataclasses.dataclass(frozen=True)
class SelectionConfig:
    """Knobs of `select_parents`. Accuracy units are whatever the study stores.

    costs: cost objectives, one drawn uniformly per suggestion: built-in ones (`COSTS`)
        or a user's (`user_costs`).
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
        results on the same validation examples tie when McNemar's exact test finds no
        difference (`nas.search.strategy.paired.mcnemar`), others when each accuracy is
        inside the other's 95 % Wilson interval (`nas.search.strategy.ties`).
    noninferiority_pt: the summary's recommendation (not parent selection): a candidate
        counts as good as the reference (the seed, or the most accurate candidate when a
        child is better than the seed) when the lower end of its paired 95 % interval
        (Tango's) of candidate - reference validation accuracy is at least minus this
        many accuracy points (`nas.search.store.recommend`).
    recommend_cost: the cost the recommendation minimizes among those non-inferior
        children (a built-in cost, `latency_ms` or a user's; default FLOPs).
    user_costs: names of the user's own costs (`search.costs`, lower is better): not a
        field of `search.selection`, `from_dict` takes them from the search section.
        `latency_ms` joins them when a front, the recommendation or a bound names it.
    constraints: {cost: upper bound} (`search.constraints`, not a field of
        `search.selection` either): parents are drawn by constrained domination
        (`nas.search.strategy.constraints`).
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
    recommend_cost: str = "flops"
    user_costs: tuple[str, ...] = ()
    constraints: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        costs = (self.costs,) if isinstance(self.costs, str) else tuple(self.costs)
        object.__setattr__(self, "costs", costs)
        named = {*costs, self.recommend_cost, *dict(self.constraints or {})}
        users = check_user_costs(self.user_costs, "user_costs")
        users += tuple(m for m in MEASURED_COSTS if m in named and m not in users)
        object.__setattr__(self, "user_costs", users)
        object.__setattr__(self, "constraints", check_constraints(
            self.constraints, [c for c in dict.fromkeys(COSTS + MEASURED_COSTS + users)
                               if not higher_better(c)],
            "constraints"))
        if not costs:
            raise ValueError("costs: need at least one cost objective")
        for c in costs:
            check_cost(c, "costs", users)
        check_cost(self.recommend_cost, "recommend_cost", users)
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
    def from_dict(cls, values: Mapping[str, Any] | None, user_costs: Sequence[str] = (),
                  constraints: Mapping[str, Any] | None = None, prefix: str = ""
                  ) -> SelectionConfig:
        """Build from a plain dict (e.g. `config.selection.to_dict()`), naming unknown keys;
        `user_costs`: the names of the search's own costs (the keys of `search.costs`);
        `constraints`: `search.constraints`; `prefix`: the section's path in a larger config
        (e.g. "search.selection."), which every error names."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)} - {"user_costs", "constraints"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"config field '{prefix}{unknown[0]}' is unknown; expected one "
                             f"of {', '.join(sorted(known))}")
        try:
            return cls(**values, user_costs=tuple(user_costs),
                       constraints=dict(constraints or {}))
        except ValueError as e:  # its checks name a field without the section
            if not prefix:
                raise
            raise ValueError(f"{prefix.rstrip('.')}: {e}") from None


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
    return aged_values(ids, accuracy, config)


def aged_values(ids: np.ndarray, accuracy: np.ndarray, config: SelectionConfig) -> np.ndarray:
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
    top = lowest_rows(np.arange(n), np.asarray(weights), top_k(n, config))
    return draw_weighted(top, weights[top], rng)


def top_k(n: int, config: SelectionConfig) -> int:
    """How many of n the draw samples among."""
    k = config.top_n if config.top_n > 0 else int(n * config.top_perc)
    return min(max(k, config.min_to_select, 1), n)


def draw_weighted(top: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> int:
    """One of `top`, p ∝ 10^(-normalized w), by inverse CDF over `top`'s order: the
    arithmetic `Generator.choice(top, p=p)` does (one uniform draw), without its checks
    of `p` (made here, so sound), which cost a tenth of a millisecond per 10,000 rows."""
    span = float(w.max() - w.min())
    w = (w - w.min()) / span if span > 0 else np.zeros_like(w)
    p = np.power(10.0, -w)
    cdf = np.cumsum(p / p.sum())
    cdf /= cdf[-1]
    return int(top[np.searchsorted(cdf, rng.random(), side="right")])


def lowest_rows(rows: np.ndarray, weights: np.ndarray, k: int, kth: float | None = None
                 ) -> np.ndarray:
    """Positions (into `rows`, given in any order) of the k lowest weights, by weight,
    equal weights by row: `np.lexsort((rows, weights))[:k]` without sorting all of them
    (the k-th weight by partition, if `kth` does not give it). Sorted stably in the order
    given, which is fast when it comes in runs (the closest-k index gives each accuracy
    group's rows by cost, so distances fall then rise)."""
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
    return ranked_behind(weights, beaten)


def ranked_behind(weights: np.ndarray, beaten: np.ndarray) -> np.ndarray:
    """`weights` with the `beaten` ones ranked after all others, in their own order."""
    if not beaten.any() or beaten.all():
        return weights
    return np.where(beaten, weights.max() + 1.0 + weights - weights.min(), weights)
