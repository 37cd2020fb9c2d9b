"""Each candidate against the seed (paired), and the one candidate the summary recommends.

Why: what a user takes from a search is one answer, which candidate to use. Every child is
compared to the seed on the same validation (and test) examples, paired example by example
(`paired`), and the answer is the cheapest candidate that is not worse than a reference by
more than a margin the user sets (`search.selection.noninferiority_pt`), with the command
that exports it. The reference is the seed (what the user would have used anyway), unless
a child is better than the seed: then the seed was not worth matching (an untrained
import), and the reference is the most accurate candidate (`recommend`). A study written
before per-example results were kept falls back to the Wilson rule
(`cheapest_matching_seed`) and says so.

The rules read a candidate's `Scored` fields only (`nas.search.store.candidate.Candidate`
has them), and a study only through its `correctness` (`Comparisons.of`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from nas.search.strategy import constraints as bounds_lib
from nas.search.strategy.population import best_order
from nas.search.strategy.selection import (
    OBJECTIVES,
    cost_value,
    higher_better,
)
from nas.search.strategy.settings import stored_value
from nas.stats import intervals, paired


class Scored(Protocol):
    """What the rules read of a candidate (`cost_value` reads its costs by name); read-only,
    so that a frozen `Candidate` satisfies it."""

    @property
    def id(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def status(self) -> str: ...
    @property
    def accuracy(self) -> float | None: ...
    @property
    def flops(self) -> float | None: ...
    @property
    def extra_metrics(self) -> dict[str, Any]: ...
    @property
    def metrics(self) -> dict[str, Any]: ...  # every reported metric


def done_of(candidates: Sequence[Scored]) -> list[Scored]:
    return [c for c in candidates if c.status == "done" and c.accuracy is not None]


def margin_pt(config: dict[str, Any] | None) -> float:
    """`search.selection.noninferiority_pt` of a study's config (its default when unset)."""
    return float(stored_value(config, "selection")["noninferiority_pt"])


def recommend_cost(config: dict[str, Any] | None) -> str:
    """`search.selection.recommend_cost` of a study's config: the cost the recommendation
    minimizes (FLOPs when unset), a built-in cost or one of the search's own."""
    return str(stored_value(config, "selection")["recommend_cost"])


def constraints(config: dict[str, Any] | None) -> dict[str, float]:
    """`search.constraints` of a study's config: {cost: upper bound} (empty: none)."""
    bounds = stored_value(config, "constraints") or {}
    return {str(k): float(v) for k, v in dict(bounds).items()}


def feasible_ids(candidates: Sequence[Scored], bounds: Mapping[str, float]) -> set[int]:
    """Ids of the done candidates within every bound (all done ones without bounds)."""
    return {c.id for c in done_of(candidates)
            if bounds_lib.violation(_costs_of(c, bounds), bounds) <= 0}


def _costs_of(c: Scored, bounds: Mapping[str, float]) -> dict[str, float | None]:
    return {cost: cost_value(c, cost) for cost in bounds}


def closest_to_bounds(candidates: Sequence[Scored], bounds: Mapping[str, float]
                      ) -> Scored | None:
    """The done candidate of least total normalized violation (ties: more accurate, then
    older): what to look at when none meets the bounds."""
    done = done_of(candidates)
    return min(done, key=lambda c: (bounds_lib.violation(_costs_of(c, bounds), bounds),
                                    -c.accuracy, c.id), default=None)


def bounds_lines(candidates: Sequence[Scored], bounds: Mapping[str, float]) -> list[str]:
    """The summary's line on `search.constraints` (none without bounds): each bound, how
    many done candidates meet it and the least value reached, and how many meet all. A
    bound nothing met is said here, when the search ends, not refused before it."""
    if not bounds:
        return []
    done = done_of(candidates)
    parts = []
    for cost, bound in bounds.items():
        values = [v for c in done if (v := cost_value(c, cost)) is not None]
        met = sum(v <= bound for v in values)
        least = f", least {min(values):.4g}" if values else ""
        parts.append(f"{cost} <= {bound:.4g} (met by {met}{least})")
    within = len(feasible_ids(done, bounds))
    return [f"bounds (search.constraints): {', '.join(parts)}; {within} of {len(done)} done "
            f"candidates are within every bound" + ("" if within else
                                                   " (none met them)")]


def recommend_for(candidates: Sequence[Scored], pairs: Comparisons,
                  config: dict[str, Any] | None) -> Recommendation:
    """`recommend` with a study config's margin, cost and bounds."""
    return recommend(candidates, pairs, margin_pt(config), recommend_cost(config),
                     constraints(config))


def seed_of(candidates: Sequence[Scored]) -> Scored | None:
    """The search's starting model: the first seed given (the parentless candidate of the
    lowest id, `nas.search.execution.seeds`), else the next seed that finished. With
    several seeds, the others (and enqueued architectures) are candidates like children."""
    return next((c for c in candidates if c.parent_id is None and c.status == "done"), None)


@dataclasses.dataclass
class Comparisons:
    """Per-example correctness of a study's candidates, and paired comparisons of them."""

    validation: dict[int, np.ndarray]
    test: dict[int, np.ndarray]
    _against: dict[tuple[int, str], dict[int, paired.Paired]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)  # `against`, once per reference

    @classmethod
    def of(cls, study: Any, ids: Sequence[int] | None = None) -> Comparisons:
        return cls(study.correctness(ids, "validation"), study.correctness(ids, "test"))

    def pair(self, a: Scored | None, b: Scored | None, split: str = "validation"
             ) -> paired.Paired | None:
        """a against b on `split`; None unless both have results on the same examples."""
        if a is None or b is None:
            return None
        bits = self.validation if split == "validation" else self.test
        if not bits:  # a study without per-example results: nothing to pair
            return None
        x, y = bits.get(a.id), bits.get(b.id)
        return paired.compare(x, y) if paired.comparable(x, y) else None

    def against(self, reference: Scored | None, split: str = "validation"
                ) -> dict[int, paired.Paired]:
        """Every candidate with results on `split` against `reference` (as `pair` gives
        it), by id, counted at once: the report and the summary compare 100,000 children
        with the seed. Empty when the reference has no results there."""
        bits = self.validation if split == "validation" else self.test
        mine = bits.get(reference.id) if reference is not None else None
        if mine is None:
            return {}
        if (reference.id, split) not in self._against:
            self._against[reference.id, split] = self._count(bits, mine)
        return self._against[reference.id, split]

    @staticmethod
    def _count(bits: dict[int, np.ndarray], mine: np.ndarray) -> dict[int, paired.Paired]:
        ids = [i for i, v in bits.items() if paired.comparable(v, mine)]
        if not ids:
            return {}
        right = np.stack([bits[i].reshape(-1) for i in ids])
        mine = np.asarray(mine, dtype=bool).reshape(-1)
        only_them = np.count_nonzero(right & ~mine, axis=1)
        only_ref = np.count_nonzero(~right & mine, axis=1)
        # each distinct table once, all at once (the same bits as one by one)
        tables, at = np.unique(np.stack([only_them, only_ref], axis=1), axis=0,
                               return_inverse=True)
        found = paired.many(mine.size, tables[:, 0], tables[:, 1])
        return {i: found[j] for i, j in zip(ids, at.reshape(-1).tolist(), strict=True)}


def versus(c: Scored, other: Scored | None, pairs: Comparisons | None,
           split: str = "validation") -> str:
    """c against `other` on `split`: the paired difference and decision (e.g. "-0.70 pt
    [-2.10, +0.00] paired, within noise"), else the Wilson decision of overlapping
    intervals ("within noise (Wilson)"); "" without accuracies on that split."""
    if other is None:
        return ""
    found = pairs.pair(c, other, split) if pairs is not None else None
    if found is not None:
        return found.text()
    key, size = (("accuracy", "val_examples") if split == "validation"
                 else ("test_accuracy", "test_examples"))
    mine = c.accuracy if key == "accuracy" else c.extra_metrics.get(key)
    theirs = other.accuracy if key == "accuracy" else other.extra_metrics.get(key)
    if mine is None or theirs is None:
        return ""
    return intervals.compare((mine, c.extra_metrics.get(size)),
                             (theirs, other.extra_metrics.get(size))) + " (Wilson)"


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """The candidate to use (None: nothing done yet), how it compares, and why."""

    candidate: Scored | None
    seed: Scored | None
    validation: paired.Paired | None  # candidate - seed, paired; None for the seed itself
    test: paired.Paired | None
    margin_pt: float
    reason: str  # why this one (or why none), the reference first
    # what it was held against: the seed, or the most accurate candidate when some child
    # is better than the seed (None: no paired results, or nothing done)
    reference: Scored | None = None
    versus_reference: paired.Paired | None = None  # candidate - reference on validation
    cost: str = "flops"  # what "cheapest" minimized (`search.selection.recommend_cost`)
    # what `validation` was measured on: the search's validation split, or the finals
    decided_on: str = "validation"
    # `search.constraints`: only candidates within them were considered; with none
    # feasible, `candidate` is None and `closest` the least violating one
    bounds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    closest: Scored | None = None

    @property
    def flops_ratio(self) -> float | None:
        c, s = self.candidate, self.seed
        if c is None or s is None or not c.flops or not s.flops:
            return None
        return float(c.flops) / float(s.flops)

    @property
    def cost_ratio(self) -> float | None:
        """The candidate's `cost` over the seed's (None where either has none, or 0)."""
        c, s = self.candidate, self.seed
        mine = cost_value(c, self.cost) if c is not None else None
        theirs = cost_value(s, self.cost) if s is not None else None
        return None if not mine or not theirs else float(mine) / float(theirs)


def recommend(candidates: Sequence[Scored], pairs: Comparisons, margin: float,
              cost: str = "flops", bounds: Mapping[str, float] | None = None
              ) -> Recommendation:
    """The cheapest (`cost`, then the reference, then id) done candidate whose paired
    validation interval against the reference has its lower end at or above -`margin`
    points; the reference itself counts (it is never worse than itself).

    The reference is the seed, unless some child is better than the seed on validation
    (its whole paired interval above 0); then it is the most accurate candidate there
    (`best_by_validation` among those paired with the seed). Why: "as good as the seed" is
    the question for a trained seed, and the rule keeps that answer for one; an untrained
    seed (an imported model at chance) is not worth matching, and the children that beat
    it are.

    With `bounds` (`search.constraints`) only candidates within them are recommended: the
    rule above over the seed and the feasible children (the reference is the seed, or the
    most accurate feasible child when one is better than the seed); if it picks the seed
    while the seed is over a bound, the most accurate feasible candidate is recommended;
    with none feasible, none is (the reason names the closest)."""
    seed = seed_of(candidates)
    if seed is None:
        return Recommendation(None, None, None, None, margin, "the seed has not finished")
    if bounds:
        return _bounded(candidates, pairs, margin, cost, dict(bounds), seed)
    if seed.id not in pairs.validation:
        return _wilson_fallback(candidates, seed, margin)
    done = [c for c in done_of(candidates)
            if cost_value(c, cost) is not None or c.id == seed.id]
    children = [c for c in done if c.id != seed.id]
    vs_seed = pairs.against(seed)
    better = [c for c in children if c.id in vs_seed and vs_seed[c.id].decision == "better"]
    unpaired = [c for c in children if c.id not in vs_seed]
    if better:
        reference = best_by_validation([seed, *(c for c in children if c.id in vs_seed)])
        why = (f"reference: candidate {reference.id}, the most accurate on validation, as "
               f"{len(better)} of {len(children)} done children are better than the seed "
               f"there (paired)")
    else:
        reference = seed
        why = "reference: the seed, as no child is better than it on validation (paired)"
    versus = pairs.against(reference)
    good = [c for c in done if c.id == reference.id
            or (c.id in versus and versus[c.id].noninferior(margin))]
    chosen = min(good, key=lambda c: (cheapness(c, cost), c.id != reference.id, c.id))
    held = (f"{len(children)} done" + (f", {len(unpaired)} without per-example results"
                                       if unpaired else ""))
    name = "the seed" if reference.id == seed.id else f"candidate {reference.id}"
    if chosen.id == seed.id and reference.id == seed.id:
        why += (f"; no child is cheaper than the seed in {cost} and non-inferior to it at "
                f"{margin:g} pt on validation (paired) ({held})")
    else:
        why += (f"; the cheapest candidate non-inferior to {name} at {margin:g} pt on "
                f"validation (paired): {len(good)} of {len(done)} done candidates are"
                + (f" ({len(unpaired)} without per-example results)" if unpaired else ""))
    return Recommendation(
        chosen, seed, pairs.pair(chosen, seed) if chosen.id != seed.id else None,
        pairs.pair(chosen, seed, "test") if chosen.id != seed.id else None, margin, why,
        reference, versus.get(chosen.id) if chosen.id != reference.id else None, cost)


def _bounded(candidates: Sequence[Scored], pairs: Comparisons, margin: float, cost: str,
             bounds: dict[str, float], seed: Scored) -> Recommendation:
    """`recommend` among the candidates within `bounds` (see there)."""
    within = feasible_ids(candidates, bounds)
    done = done_of(candidates)
    limits = bounds_lib.bounds_text(bounds)
    if not within:
        near = closest_to_bounds(done, bounds)
        what = ", ".join(f"{k} {_number(cost_value(near, k))}" for k in bounds) \
            if near is not None else ""
        return Recommendation(
            None, seed, None, None, margin,
            f"no done candidate is within search.constraints ({limits}); the closest is "
            f"candidate {near.id} ({what})" if near is not None else "nothing done",
            cost=cost, bounds=bounds, closest=near)
    free = recommend([c for c in candidates if c.id in within or c.id == seed.id], pairs,
                     margin, cost)
    chosen, why = free.candidate, free.reason
    if chosen is not None and chosen.id not in within:  # only the seed was non-inferior
        chosen = best_by_validation([c for c in done if c.id in within])
        why += (f"; the seed is over a bound, so the most accurate candidate within them "
                f"(candidate {chosen.id})")
    why += f"; {len(within)} of {len(done)} done candidates are within {limits}"
    ref = free.reference
    return dataclasses.replace(
        free, candidate=chosen, reason=why, bounds=bounds,
        validation=pairs.pair(chosen, seed) if chosen.id != seed.id else None,
        test=pairs.pair(chosen, seed, "test") if chosen.id != seed.id else None,
        versus_reference=(pairs.pair(chosen, ref) if ref is not None and chosen.id != ref.id
                          else None))


def _number(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:.4g}"


def cheapness(c: Scored, cost: str) -> float:
    """What "cheapest" sorts by: `cost` (negated where more is better); no value (or a
    built-in cost of 0, not measured) last."""
    value = cost_value(c, cost)
    if value is None or (not value and cost in OBJECTIVES):
        return float("inf")
    return -float(value) if higher_better(cost) else float(value)


def _wilson_fallback(candidates: Sequence[Scored], seed: Scored, margin: float
                     ) -> Recommendation:
    cheap = cheapest_matching_seed([c for c in candidates if c.status == "done"], seed)
    if cheap is None or not seed.flops or not cheap.flops or cheap.flops >= seed.flops:
        return Recommendation(seed, seed, None, None, margin,
                              "no per-example results in this study (written by an older "
                              "nas) and no cheaper child tied with the seed (Wilson)")
    return Recommendation(cheap, seed, None, None, margin,
                          "no per-example results in this study (written by an older nas): "
                          "the cheapest child tied with the seed by Wilson intervals")


def best_by_validation(candidates: Sequence[Scored]) -> Scored | None:
    """The done candidate of highest validation accuracy (ties: fewer FLOPs, then older),
    as `Study.best` orders them."""
    return min(done_of(candidates), key=best_order, default=None)


def export_command(workdir: Any, candidate_id: int, take_home: bool = False) -> str:
    """The exact command that exports a candidate (`take_home`: the model the finals
    trained for the recommendation, `--id=recommended`)."""
    return (f"nas-search export --workdir={workdir} --id="
            f"{'recommended' if take_home else candidate_id} "
            f"--out=candidate_{candidate_id}.zip")


def recommendation_lines(rec: Recommendation, workdir: Any, take_home: bool = False
                         ) -> list[str]:
    """The summary's last lines: `recommended: ...` (against the seed, which reference it
    was held to and why) and the export command."""
    c, seed = rec.candidate, rec.seed
    if c is None and rec.closest is not None:
        return [f"recommended: none: {rec.reason}"]
    if c is None or seed is None:
        return [f"recommended: none yet ({rec.reason})"]
    ref, vr = rec.reference, rec.versus_reference
    notes = rec.reason + (f"; vs candidate {ref.id} {vr.text()}"
                          if ref is not None and vr is not None and ref.id != seed.id
                          else "")
    if c.id == seed.id:
        line = f"recommended: the seed, candidate {c.id} ({notes})"
    else:
        name = "FLOPs" if rec.cost == "flops" else rec.cost
        cost = (f"{rec.cost_ratio:.3f} of the seed's {name}" if rec.cost_ratio is not None
                else f"{name} not comparable with the seed's")
        v = rec.validation
        versus = (f", {rec.decided_on} {100 * v.difference:+.2f} pt [{100 * v.low:+.2f}, "
                  f"{100 * v.high:+.2f}] paired vs the seed" if v is not None else "")
        line = (f"recommended: candidate {c.id}, {cost}{versus} ({notes}"
                + (f"; test {rec.test.text()}" if rec.test is not None else "") + ")")
    return [line, "  " + export_command(workdir, c.id, take_home)]


def cheapest_matching_seed(done: Sequence[Scored], seed: Scored | None
                           ) -> Scored | None:
    """The child with the fewest FLOPs whose validation accuracy ties the seed's (each
    inside the other's interval, as selection ranks them) or is above it: chosen on
    validation, so its test accuracy is an honest report (None when there is none)."""
    n = seed.extra_metrics.get("val_examples") if seed is not None else None
    if seed is None or not seed.flops or seed.accuracy is None or not n:
        return None
    ties: dict[tuple[float, int], bool] = {}  # accuracies repeat (k of n): each once

    def matches(accuracy: float, size: int) -> bool:
        if (accuracy, size) not in ties:
            ties[accuracy, size] = accuracy >= seed.accuracy or intervals.tied(
                accuracy, size, seed.accuracy, int(n))
        return ties[accuracy, size]

    matched = [c for c in done if c.id != seed.id and c.flops is not None
               and c.accuracy is not None and c.extra_metrics.get("val_examples")
               and matches(c.accuracy, int(c.extra_metrics["val_examples"]))]
    return min(matched, key=lambda c: (c.flops, c.id), default=None)
