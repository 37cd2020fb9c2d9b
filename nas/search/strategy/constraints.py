"""Upper bounds on costs (`search.constraints`) and constrained domination (Deb's rule).

Why: a user who deploys asks for "the most accurate model under 5 ms". A candidate over a
bound is trained and recorded but infeasible: selection prefers every feasible candidate
to it, and of infeasible ones the smaller total violation (Deb, 2000), so the search walks
into the feasible region; the recommendation considers only feasible candidates. A
violation is in units of its bound, so flops and milliseconds add up; a candidate without
a value for a bounded cost violates it infinitely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas import schema


def check_constraints(bounds: Mapping[str, Any] | None, cost_names: Sequence[str],
                      field: str = "search.constraints") -> dict[str, float]:
    """{cost: bound}, each a finite number >= 0 on a cost of `cost_names`, else one
    ValueError line naming the cost."""
    if bounds is None:
        return {}
    if not isinstance(bounds, Mapping):
        raise ValueError(f"{field}: expected a dict of cost name to upper bound, got "
                         f"{type(bounds).__name__} {bounds!r:.60}")
    out = {}
    for name, bound in bounds.items():
        # a name that is not a word is quoted, so the message stays one line
        where = f"{field}.{name}" if str(name).isidentifier() else f"{field}[{name!r}]"
        if name not in cost_names:
            raise ValueError(f"{where}: unknown cost {name!r}; a bound applies to one "
                             f"of {tuple(cost_names)} (a user's cost is named in search.costs)")
        if not schema.at_least(0, float).ok(bound):
            raise ValueError(f"{where}: expected an upper bound, a finite number >= 0, "
                             f"got {bound!r:.60}")
        out[str(name)] = float(bound)
    return out


def violations(costs: Mapping[str, np.ndarray], bounds: Mapping[str, float], n: int
               ) -> np.ndarray:
    """Each row's total normalized violation, sum of max(0, value - bound) / bound (a
    missing value: inf); 0 means feasible."""
    total = np.zeros(n, dtype=float)
    for cost, bound in bounds.items():
        values = np.asarray(costs[cost], dtype=float) if cost in costs else np.full(n, np.nan)
        over = np.maximum(values - bound, 0.0) / (bound if bound > 0 else 1.0)  # in bounds
        total += np.where(np.isnan(values), np.inf, over)
    return total


def violation(values: Mapping[str, float | None], bounds: Mapping[str, float]) -> float:
    """One candidate's total normalized violation (`violations` for one row)."""
    columns = {c: np.array([np.nan if values.get(c) is None else float(values[c])])
               for c in bounds}
    return float(violations(columns, bounds, 1)[0])


def constrained_dominates(a: Sequence[float], b: Sequence[float], violation_a: float,
                          violation_b: float, higher_better: Sequence[bool]) -> bool:
    """Deb's rule: does a dominate b? Feasible beats infeasible; of two infeasible the
    smaller violation; of two feasible, Pareto domination (`higher_better` per objective)."""
    feasible_a, feasible_b = violation_a <= 0, violation_b <= 0
    if feasible_a != feasible_b:
        return feasible_a
    if not feasible_a:
        return violation_a < violation_b
    signs = np.where(np.asarray(higher_better, dtype=bool), 1.0, -1.0)
    x, y = np.asarray(a, dtype=float) * signs, np.asarray(b, dtype=float) * signs
    return bool(np.all(x >= y) and np.any(x > y))


def constrained_order(violation_of: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weights ranking by Deb's rule: feasible rows first, by `weights`; infeasible ones
    after, by violation (infinite ones last)."""
    weights = np.asarray(weights, dtype=float)
    v = np.asarray(violation_of, dtype=float)
    feasible = v <= 0
    if feasible.all():
        return weights
    top = float(weights[feasible].max() - weights[feasible].min()) if feasible.any() else 0.0
    finite = v[np.isfinite(v)]
    worst = float(finite.max()) if len(finite) else 0.0
    ranked = np.where(np.isfinite(v), v, 2.0 * worst + 1.0)
    base = (float(weights[feasible].min()) if feasible.any() else 0.0) + top + 1.0
    return np.where(feasible, weights, base + ranked)


def bounds_text(bounds: Mapping[str, float]) -> str:
    """"flops <= 4.5e+07, latency_ms <= 2" (empty without bounds)."""
    return ", ".join(f"{cost} <= {bound:.4g}" for cost, bound in bounds.items())
