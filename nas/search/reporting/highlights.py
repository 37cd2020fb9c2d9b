"""Which candidates a report shows one by one: the fronts, the best k, the seed and the
recommended candidate.

Why: a study of 100,000 candidates cannot be one page with a point, a row and a section
for each. These few are what a reader acts on; the rest is drawn as density, kept whole
in report.csv, and served one by one by the dashboard.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence

import numpy as np

from nas.search.store.candidate import Candidate, Status
from nas.search.store.finals import Answer, answer
from nas.search.strategy import recommend
from nas.search.strategy.pareto import front_rows
from nas.search.strategy.population import best_order
from nas.search.strategy.selection import cost_value, higher_better, spreads_of

# Finished candidates up to which the report draws every point and lists every row.
SCALE_LIMIT = 300


def front_of(candidates: Sequence[Candidate], cost: str) -> list[Candidate]:
    """Done candidates on the accuracy/`cost` front, in cost order (`cost` may be a user's,
    lower is better). A cost with a spread (`<cost>_iqr`) is tied within it, as
    selection's fronts tie it (`nas.stats.cost_ties`)."""
    values = {c.id: v for c in candidates if c.status == Status.DONE and c.accuracy is not None
              and (v := cost_value(c, cost)) is not None}
    done = [c for c in candidates if c.id in values]
    rows = front_rows(np.array([c.accuracy for c in done], dtype=float),
                      np.array([values[c.id] for c in done], dtype=float),
                      higher_better(cost), spreads_of(done, cost))
    return sorted((done[i] for i in rows), key=lambda c: (float(values[c.id]), c.id))


def ranked_costs(study: object) -> list[str]:
    """The costs the search ranked parents by (`search.selection.costs` of its config)."""
    from nas.search.strategy.settings import stored_value

    costs = stored_value(getattr(study, "config", None), "selection")["costs"]
    return [costs] if isinstance(costs, str) else list(costs)


def best_of(candidates: Sequence[Candidate], k: int) -> list[Candidate]:
    """The `k` most accurate done candidates, in `Study.best`'s order."""
    done = (c for c in candidates if c.status == Status.DONE and c.accuracy is not None)
    return heapq.nsmallest(k, done, key=best_order)


@dataclasses.dataclass(frozen=True)
class Highlights:
    """The candidates a report shows in detail, and why each is shown."""

    fronts: dict[str, list[Candidate]]  # ranked cost -> its front, in cost order
    best: list[Candidate]  # the k most accurate
    seed: Candidate | None
    pairs: recommend.Comparisons
    done: int  # finished candidates with an accuracy
    found: Answer  # the recommendation, from the finals or the search
    user_costs: tuple[str, ...]  # the search's own costs (`Study.user_costs`)

    @classmethod
    def of(cls, study: object, candidates: Sequence[Candidate], k: int) -> Highlights:
        pairs = recommend.Comparisons.of(study)
        return cls({cost: front_of(candidates, cost) for cost in ranked_costs(study)},
                   best_of(candidates, k), recommend.seed_of(candidates), pairs,
                   sum(c.status == Status.DONE and c.accuracy is not None for c in candidates),
                   answer(study, pairs), tuple(getattr(study, "user_costs", ())))

    @property
    def large(self) -> bool:
        """Too many finished candidates to show each."""
        return self.done > SCALE_LIMIT

    @property
    def front_ids(self) -> set[int]:
        return {c.id for front in self.fronts.values() for c in front}

    @property
    def recommendation(self) -> recommend.Recommendation:
        return self.found.recommendation

    @property
    def recommended(self) -> Candidate | None:
        return self.found.recommendation.candidate

    def ids(self) -> set[int]:
        """Every candidate shown in detail."""
        out = self.front_ids | {c.id for c in self.best}
        out |= {c.id for c in (self.seed, self.recommended) if c is not None}
        return out

    def reasons(self, cid: int) -> list[str]:
        """Why `cid` is shown, e.g. ["on a front", "best 10", "recommended"]."""
        out = []
        if cid in self.front_ids:
            out.append("on a front")
        if any(c.id == cid for c in self.best):
            out.append(f"best {len(self.best)} by validation accuracy")
        if self.seed is not None and cid == self.seed.id:
            out.append("the seed")
        if self.recommended is not None and cid == self.recommended.id:
            out.append("recommended")
        return out
