"""Best accuracy and Pareto-front size as a search went on, in one pass.

Why: the report plots both against the number of finished candidates. Recomputing the
front after each of n candidates costs n fronts (minutes at 10,000 candidates); keeping
it up to date as each candidate arrives costs a binary search and a few list edits each.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from nas.search.store.candidate import Candidate, Status
from nas.search.strategy.selection import check_cost, cost_value, higher_better


class RunningFront:
    """The accuracy/cost Pareto front of the points added so far, and how many candidates
    lie on it (candidates with the same accuracy and cost as a front point all count, as
    `front_of` lists them). Points are kept standardized (higher is better in both), by
    the second coordinate ascending, so accuracy descends along the list. `user_costs`:
    the names of the search's own costs, which `cost` may be too."""

    def __init__(self, cost: str, user_costs: Sequence[str] = ()):
        check_cost(cost, "cost", user_costs)
        self._sign = 1.0 if higher_better(cost) else -1.0
        self._second: list[float] = []  # ascending
        self._first: list[float] = []  # descending, accuracy
        self._count: list[int] = []  # candidates at each point
        self.size = 0

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


def progress_series(candidates: Sequence[Candidate], cost: str = "flops",
                    user_costs: Sequence[str] = ()) -> list[tuple[int, float, int]]:
    """(n finished, best accuracy so far, front size so far) in the order candidates
    finished (done candidates with an accuracy; the front over those with `cost`, which
    may be one of `user_costs`, the search's own)."""
    done = sorted((c for c in candidates if c.status == Status.DONE and c.accuracy is not None),
                  key=lambda c: (c.finished_at or 0.0, c.id))
    front = RunningFront(cost, user_costs)
    out: list[tuple[int, float, int]] = []
    best = float("-inf")
    for n, c in enumerate(done, start=1):
        best = max(best, c.accuracy)
        value = cost_value(c, cost)
        if value is not None:
            front.add(c.accuracy, value)
        out.append((n, best, front.size))
    return out


def changes(series: Sequence[tuple[int, float, int]]) -> list[tuple[int, float, int]]:
    """The entries of `series` where the best accuracy or the front size changed, and the
    last: the same step charts, drawn from far fewer points."""
    out = [e for i, e in enumerate(series) if i == 0 or e[1:] != series[i - 1][1:]]
    if series and out[-1] != series[-1]:
        out.append(series[-1])
    return out
