"""The dashboard overview's pictures of the fronts: validation accuracy against each cost
the search ranks parents by (`search.selection.costs`), the seed and the recommended
candidate marked, redrawn when a candidate finishes.

Why its own module: the overview answers every 2 s, at 100,000 candidates too. Every
picture depends only on which candidates are done, and a done candidate never changes, so
the population is read incrementally (`DoneCache`: each finished row once, without its
graph), the per-example results of each new row are kept, and the fronts, the
recommendation (`recommend.recommend`, as the summary makes it) and the SVGs are computed
again only when the number of done candidates changed. Up to `SCALE_LIMIT` finished
candidates each is a point; past it the population is density under the highlighted
points (the fronts, the best k, the seed, the recommended), as in the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.io import examples
from nas.search.reporting.highlights import SCALE_LIMIT, best_of, ranked_costs
from nas.search.reporting.report import COST_LABELS, front_label, val_accuracy_text
from nas.search.reporting.svg import Point, generation_colour, scatter
from nas.search.store import recommend
from nas.search.store.candidate import Candidate
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.population import DoneCache
from nas.search.strategy.selection import OBJECTIVES


def cost_of(row: Any, cost: str) -> float | None:
    """`cost` of a candidate or a population row: a built-in cost is an attribute, one of
    the search's own a number in its metrics (None when absent or not finite)."""
    value = (getattr(row, cost, None) if cost in OBJECTIVES
             else (getattr(row, "extra_metrics", None) or {}).get(cost))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def front(rows: Sequence[Any], cost: str) -> list[Any]:
    """The rows on the accuracy/`cost` Pareto front (ties included), in cost order."""
    valued = [(r, v) for r in rows if r.accuracy is not None
              and (v := cost_of(r, cost)) is not None]
    if not valued:
        return []
    curve = ParetoCurve([(r.accuracy, v) for r, v in valued],
                        (True, OBJECTIVES.get(cost, False)))
    on = {tuple(p) for p in curve.points.tolist()}
    return sorted((r for r, v in valued if (r.accuracy, v) in on),
                  key=lambda r: (cost_of(r, cost), r.id))


class LiveFronts:
    """The overview's front pictures of one study, kept up to date as candidates finish.
    Owned by a long-lived `Dashboard`; not shared between threads (its caller locks)."""

    def __init__(self, study: Any, k: int = 10) -> None:
        self.study = study
        self.k = k
        self._done = DoneCache(study)
        self._val: dict[int, np.ndarray] = {}  # per-example validation results, by id
        self._test: dict[int, np.ndarray] = {}
        self._read: set[int] = set()  # ids whose results are in `_val` / `_test`
        self._drawn: tuple[int, dict[str, Any]] | None = None  # (done count, pictures)
        self._whole: dict[int, Candidate] = {}  # rows read whole for the last pictures

    def pictures(self) -> dict[str, Any]:
        """{"plots": [{"cost", "label", "svg"}, ...], "seed": id, "recommended": id,
        "done": n}: one plot per ranked cost, redrawn only when a candidate finished."""
        self._done.refresh()
        done = self._done.done()
        if self._drawn is None or self._drawn[0] != len(done):
            self._drawn = (len(done), self._draw(done))
        return self._drawn[1]

    def _draw(self, done: list[Any]) -> dict[str, Any]:
        rec = self._recommendation(done)
        seed = recommend.seed_of(done)
        marks = {seed.id: "seed"} if seed is not None else {}
        if rec is not None and seed is not None and rec.id != seed.id:
            marks[rec.id] = "recommended"
        costs = ranked_costs(self.study)
        fronts = {cost: front(done, cost) for cost in costs}
        large = len(done) > SCALE_LIMIT
        if large:  # the highlighted candidates as points, read whole (a few rows, each
            ids = {r.id for f in fronts.values() for r in f} | set(marks)  # once: final)
            ids |= {r.id for r in best_of(done, self.k)}
            shown = {i: self._whole.get(i) or self.study.get(i) for i in sorted(ids)}
            self._whole = shown  # bounded: only what the pictures show now
        else:
            kept = {r.id for r in done}
            shown = {c.id: c for c in self.study.candidates("done", with_graphs=False)
                     if c.id in kept}
        top = max((c.generation for c in shown.values()), default=0)
        labels = dict(COST_LABELS)
        plots = []
        for cost in costs:
            label = labels.get(cost, cost)
            points = {c.id: _point(c, cost, label, marks, top) for c in shown.values()
                      if c.accuracy is not None and cost_of(c, cost) is not None}
            on = [points[r.id] for r in fronts[cost] if r.id in points]
            for p in on:
                p.ring = True
            density = ([(v, r.accuracy) for r in done if (v := cost_of(r, cost)) is not None]
                       if large else [])
            edges = [] if large else [(points[c.parent_id], points[c.id])
                                      for c in shown.values() if c.id in points
                                      and c.parent_id in points]
            plots.append({"cost": cost, "label": front_label(cost), "svg": scatter(
                list(points.values()), label, "validation accuracy",
                f"scatter live-front scatter-{cost}", on, edges=edges, density=density)})
        return {"plots": plots, "done": len(done), "large": large,
                "seed": seed.id if seed is not None else None,
                "recommended": rec.id if rec is not None else None}

    def _recommendation(self, done: list[Any]) -> Any:
        """The recommended candidate (a population row), from the per-example results read
        so far plus those of the rows new since the last call."""
        new = [r for r in done if r.id not in self._read]
        for r in new:
            if r.val_bits is not None and r.val_count:
                self._val[r.id] = examples.unpack(r.val_bits, int(r.val_count))
        if new:
            self._test.update(self.study.correctness([r.id for r in new], "test"))
            self._read.update(r.id for r in new)
        pairs = recommend.Comparisons(self._val, self._test)
        config = getattr(self.study, "config", None)
        return recommend.recommend(done, pairs, recommend.margin_pt(config),
                                   recommend.recommend_cost(config)).candidate


def _point(c: Candidate, cost: str, label: str, marks: dict[int, str], top: int) -> Point:
    value = cost_of(c, cost)
    mark = marks.get(c.id, "")
    return Point(float(value), float(c.accuracy),
                 f"candidate {c.id} (generation {c.generation}, parent {c.parent_id}"
                 + (f", {mark}" if mark else "") + f"): validation accuracy "
                 f"{val_accuracy_text(c)}, {label} {value:.4g}",
                 href=f"/candidates/{c.id}", colour=generation_colour(c.generation, top),
                 ident=str(c.id), mark=mark)
