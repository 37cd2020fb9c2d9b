"""Multi-fidelity search: children train a small budget first, the promising ones go on.

Asynchronous successive halving (as Ray Tune's ASHA) with suspend and resume: a child trains
to its first rung (on the full budget's schedule), is evaluated, and is promoted (re-queued
to resume from its checkpoint to the next rung) or stopped. The last rung is
`train.total_epochs`; the seed always trains its whole budget. A child is promoted when:
- among the n results recorded at that rung so far (its own included) it is in the best
  `max(1, floor(n * keep))` by accuracy, or with `cost` by Pareto layer of accuracy against
  it, then crowding distance (NSGA-II's order);
- its accuracy is at least `parent_ratio` times its parent's.

The decision (`promotion`) is a pure function of the recorded results, made once, in the
transaction that records the rung, never again on resume. With several workers it depends
on which peers had reported, as in ASHA.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from nas import schema
from nas.search.strategy.selection import OBJECTIVES

RUNG_COSTS = ("", "flops", "params")  # what a rung ranks by: accuracy alone, or vs a cost


@dataclasses.dataclass(frozen=True)
class RungResult:
    """One candidate's evaluation at a rung."""

    candidate_id: int
    accuracy: float
    cost: float | None = None


@dataclasses.dataclass(frozen=True)
class FidelityConfig(schema.Section):
    """`search.fidelity`. rungs: epochs at which children are compared before the full
    budget (empty: off); keep: fraction promoted; parent_ratio: below this fraction of its
    parent's accuracy a child stops; cost: "" ranks by accuracy, else by Pareto layer."""

    rungs: tuple[float, ...] = schema.setting((), schema.Field(
        list, check=lambda rungs: all(schema.positive(float).ok(r) for r in rungs),
        expected="of epochs > 0"))
    keep: float = schema.setting(0.5, schema.Field(float, low=0, low_open=True, high=1))
    parent_ratio: float = schema.setting(0.5, schema.at_least(0, float))
    cost: str = schema.setting("", schema.one_of(*RUNG_COSTS, expected="('': accuracy only)"))

    def check_section(self, prefix: str) -> None:
        rungs = tuple(float(r) for r in self.rungs)
        if any(b <= a for a, b in zip(rungs, rungs[1:], strict=False)):
            raise ValueError(f"config field '{prefix}rungs' must be epochs that increase, "
                             f"got {list(self.rungs)}")
        object.__setattr__(self, "rungs", rungs)

    def schedule(self, full_epochs: float, prefix: str = "search.fidelity.") -> tuple[float, ...]:
        """Every rung's epochs, the full budget last (() when off); a rung above the full
        budget is an error naming `prefix`'s rungs."""
        if not self.rungs:
            return ()
        full = float(full_epochs)
        if self.rungs[-1] > full:
            raise ValueError(f"config field '{prefix}rungs': {self.rungs[-1]:g} "
                             f"epochs exceeds the full budget train.total_epochs={full:g}")
        rungs = self.rungs[:-1] if self.rungs[-1] == full else self.rungs
        return (*rungs, full)


def rung_order(results: Sequence[RungResult], by_cost: bool = False,
               higher_cost_better: bool = False) -> list[int]:
    """Candidate ids from most to least promising: by accuracy (ties: older first), or with
    `by_cost` by Pareto layer, crowding distance, accuracy, id (a missing cost is worst)."""
    if not by_cost:
        return [r.candidate_id for r in sorted(results, key=lambda r: (-r.accuracy,
                                                                       r.candidate_id))]
    sign = 1.0 if higher_cost_better else -1.0
    points = {r.candidate_id: (r.accuracy, -math.inf if r.cost is None else sign * r.cost)
              for r in results}
    left = sorted(points)
    order: list[int] = []
    while left:
        layer = [i for i in left if not any(_dominates(points[j], points[i]) for j in left)]
        crowd = _crowding(layer, points)
        order += sorted(layer, key=lambda i: (-crowd[i], -points[i][0], i))
        left = [i for i in left if i not in set(layer)]
    return order


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] >= b[0] and a[1] >= b[1] and a != b


def _crowding(layer: list[int], points: dict[int, tuple[float, float]]) -> dict[int, float]:
    """NSGA-II crowding distance: the ends of each objective are infinitely far."""
    out = dict.fromkeys(layer, 0.0)
    for k in (0, 1):
        ranked = sorted(layer, key=lambda i: (points[i][k], i))
        low, high = points[ranked[0]][k], points[ranked[-1]][k]
        out[ranked[0]] = out[ranked[-1]] = math.inf
        span = high - low
        if not math.isfinite(span) or span <= 0:
            continue
        for a, mid, b in zip(ranked, ranked[1:], ranked[2:], strict=False):
            out[mid] += (points[b][k] - points[a][k]) / span
    return out


def promotion(me: RungResult, peers: Sequence[RungResult], config: FidelityConfig,
              parent_accuracy: float | None) -> tuple[bool, str]:
    """Whether `me` goes on from its rung, and why, given the other results at that rung
    and its parent's accuracy (None: no parent check)."""
    results = [me, *[p for p in peers if p.candidate_id != me.candidate_id]]
    n = len(results)
    top = max(1, math.floor(n * config.keep + 1e-9))
    by_cost = bool(config.cost)
    order = rung_order(results, by_cost, by_cost and OBJECTIVES[config.cost])
    rank = order.index(me.candidate_id) + 1
    ranking = (f"rank {rank} of {n} at this rung by "
               f"{'Pareto layer of accuracy vs ' + config.cost if by_cost else 'accuracy'}"
               f" (best {top} go on)")
    if parent_accuracy is not None and me.accuracy < config.parent_ratio * parent_accuracy:
        return False, (f"accuracy {me.accuracy:.4g} < {config.parent_ratio:g} x parent's "
                       f"{parent_accuracy:.4g}; {ranking}")
    return rank <= top, ranking


@dataclasses.dataclass(frozen=True)
class RungPlan:
    """The rungs of one search: its config and every rung's epochs (`schedule`). Only
    children have rungs."""

    config: FidelityConfig = FidelityConfig()
    epochs: tuple[float, ...] = ()

    @classmethod
    def from_config(cls, fidelity: Mapping[str, Any] | FidelityConfig | None,
                    full_epochs: float) -> RungPlan:
        config = FidelityConfig.from_dict(fidelity, "search.fidelity.")
        return cls(config, config.schedule(full_epochs))

    def applies(self, candidate: Any) -> bool:
        return bool(self.epochs) and candidate.parent_id is not None

    def is_last(self, rung: int) -> bool:
        return rung == len(self.epochs) - 1

    def rung_epochs(self, candidate: Any) -> float:
        """The epochs `candidate` trains to at its current rung."""
        rung = int(candidate.rung)
        if not 0 <= rung < len(self.epochs):
            raise ValueError(f"candidate {candidate.id}: rung {rung} is not one of this "
                             f"search's {len(self.epochs)} rungs {list(self.epochs)}")
        return self.epochs[rung]

    def stop_epochs(self, candidate: Any) -> float | None:
        """Its rung's epochs, or None (the whole schedule) at the last rung or without."""
        if not self.applies(candidate):
            return None
        epochs = self.rung_epochs(candidate)
        return None if self.is_last(int(candidate.rung)) else epochs

    def decide(self, me: RungResult, peers: list[RungResult],
               parent_accuracy: float | None) -> tuple[bool, str]:
        return promotion(me, peers, self.config, parent_accuracy)
