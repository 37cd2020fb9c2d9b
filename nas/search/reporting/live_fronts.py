"""The dashboard overview's pictures of the fronts: validation accuracy against each cost
the search ranks parents by (`search.selection.costs`), the seed and the recommended
candidate marked, redrawn when a candidate finishes.

Why its own module: the overview answers every 2 s, at 100,000 candidates too. Every
picture depends only on which candidates are done, and a done candidate never changes, so
the population is read incrementally (`Study.done_rows`: each finished row once, without
its graph), the per-example results of each new row are kept and compared only once with
each reference (`GrowingComparisons`), and the fronts, the recommendation
(`recommend.recommend`, as the summary makes it) and the SVGs are computed again only when
the number of done candidates changed. Up to `SCALE_LIMIT` finished
candidates each is a point; past it the population is density under the highlighted
points (the fronts, the best k, the seed, the recommended), as in the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.io import examples
from nas.search.reporting.highlights import SCALE_LIMIT, ranked_costs
from nas.search.reporting.report import COST_LABELS, front_label, val_accuracy_text
from nas.search.reporting.svg import Point, generation_colour, scatter
from nas.search.store.candidate import Candidate, Status
from nas.search.strategy import recommend
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.selection import OBJECTIVES, cost_value, higher_better


def front_mask(accuracy: np.ndarray, values: np.ndarray, cost: str) -> np.ndarray:
    """Which of the (accuracy, `cost` value) pairs are on their Pareto front (ties with a
    front point included); NaN (no value) never is."""
    ok = np.isfinite(accuracy) & np.isfinite(values)
    out = np.zeros(accuracy.shape, dtype=bool)
    if not ok.any():
        return out
    curve = ParetoCurve(np.column_stack([accuracy[ok], values[ok]]),
                        (True, higher_better(cost)))
    for a, v in curve.points.tolist():  # a front has few points; the rows are many
        out |= (accuracy == a) & (values == v)
    return out


@dataclasses.dataclass
class GrowingComparisons(recommend.Comparisons):
    """`recommend.Comparisons` over results that only grow (the caller adds to
    `validation` / `test`): `against` counts only the candidates added since it last
    counted against that reference, each as a fresh `Comparisons` would (a candidate's
    paired result depends on its own and the reference's results alone). So a redraw
    after one more candidate finished compares one child, not 100,000, with the seed."""

    _grown: dict[tuple[int, str], dict[int, Any]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)

    KEPT = 4  # references whose counts are kept (the seed and the most accurate, mostly)

    def against(self, reference: Any, split: str = "validation") -> dict[int, Any]:
        bits = self.validation if split == "validation" else self.test
        mine = bits.get(reference.id) if reference is not None else None
        if mine is None:
            return {}
        known = self._grown.pop((reference.id, split), {})  # back in as the newest
        fresh = {i: v for i, v in bits.items() if i not in known}
        if fresh:
            fresh[reference.id] = mine
            known.update(recommend.Comparisons(fresh, {}).against(reference))
        while len(self._grown) >= self.KEPT:
            self._grown.pop(next(iter(self._grown)))
        self._grown[reference.id, split] = known
        return known


class _Columns:
    """The done rows seen so far, in arrival order, with accuracy and each cost as arrays
    (NaN: none): a done candidate never changes, so they only grow."""

    def __init__(self, costs: Sequence[str]) -> None:
        self.rows: list[Any] = []
        self.ids = np.zeros(0, dtype=np.int64)
        self.accuracy = np.zeros(0)
        self.values = {cost: np.zeros(0) for cost in (*costs, "flops")}

    def extend(self, rows: Sequence[Any]) -> None:
        self.rows.extend(rows)
        self.ids = np.concatenate([self.ids, np.array([r.id for r in rows], dtype=np.int64)])
        self.accuracy = np.concatenate([self.accuracy, np.array(
            [np.nan if r.accuracy is None else r.accuracy for r in rows], dtype=float)])
        for cost in self.values:  # a built-in cost is a float or None (NaN here)
            new = (np.array([getattr(r, cost) for r in rows], dtype=float)
                   if cost in OBJECTIVES else
                   np.array([np.nan if (v := cost_value(r, cost)) is None else v
                             for r in rows], dtype=float))
            self.values[cost] = np.concatenate([self.values[cost], new])

    def best(self, k: int) -> list[int]:
        """Ids of the k most accurate (ties: fewer FLOPs, then older), as `Study.best`."""
        flops = np.where(np.isfinite(self.values["flops"]), self.values["flops"], np.inf)
        ok = np.flatnonzero(np.isfinite(self.accuracy))
        order = np.lexsort((self.ids[ok], flops[ok], -self.accuracy[ok]))[:k]
        return self.ids[ok][order].tolist()


class LiveFronts:
    """The overview's front pictures of one study, kept up to date as candidates finish.
    Owned by a long-lived `Dashboard`; not shared between threads (its caller locks)."""

    def __init__(self, study: Any, k: int = 10) -> None:
        self.study = study
        self.k = k
        self.costs = ranked_costs(study)  # search.selection.costs
        self._through = 0  # every candidate with an id up to this is finished and read
        self._settled: list[Any] = []  # the done rows up to `_through`, by id
        self._columns = _Columns(self.costs)
        self._pairs = GrowingComparisons({}, {})  # per-example results, grown as read
        self._read: set[int] = set()  # ids in `_columns` (and their results read)
        self._drawn: tuple[int, dict[str, Any]] | None = None  # (done count, pictures)
        self._whole: dict[int, Candidate] = {}  # rows read whole for the last pictures

    def pictures(self) -> dict[str, Any]:
        """{"plots": [{"cost", "label", "svg"}, ...], "seed": id, "recommended": id,
        "done": n, "large": bool}: one plot per ranked cost, redrawn only when a candidate
        finished."""
        done = self._refresh()
        if self._drawn is None or self._drawn[0] != len(done):
            self._absorb(done)
            self._drawn = (len(done), self._draw(done))
        return self._drawn[1]

    def _refresh(self) -> list[Any]:
        """Every done row (`Study.done_rows`: no graph), by id. Those up to the first
        unfinished candidate are final and read once; the few done past it (finished out
        of order) are read again each time, a few indexed queries in all."""
        first_open = self.study.first_unfinished_id()
        end = self.study.last_id() if first_open is None else first_open - 1
        if end > self._through:
            self._settled.extend(self.study.done_rows(self._through, end))
            self._through = end
        return self._settled + self.study.done_rows(self._through)

    def _absorb(self, done: list[Any]) -> None:
        """Take in the rows new since the last call, with their per-example results."""
        new = [r for r in done if r.id not in self._read]
        if not new:
            return
        self._pairs.validation.update(_unpacked(new))
        self._pairs.test.update(self.study.correctness([r.id for r in new], "test"))
        self._read.update(r.id for r in new)
        self._columns.extend(new)

    def _draw(self, done: list[Any]) -> dict[str, Any]:
        cols = self._columns
        config = getattr(self.study, "config", None)
        rec = recommend.recommend_for(done, self._pairs, config).candidate
        seed = recommend.seed_of(done)
        marks = {seed.id: "seed"} if seed is not None else {}
        if rec is not None and seed is not None and rec.id != seed.id:
            marks[rec.id] = "recommended"
        on = {cost: front_mask(cols.accuracy, cols.values[cost], cost) for cost in self.costs}
        large = len(done) > SCALE_LIMIT
        if large:  # the highlighted candidates as points, read whole (a few rows, each
            ids = set(marks) | set(cols.best(self.k))  # once: a finished row is final)
            ids |= {int(i) for mask in on.values() for i in cols.ids[mask]}
            shown = {i: self._whole.get(i) or self.study.get(i) for i in sorted(ids)}
            self._whole = shown  # bounded: only what the pictures show now
        else:
            kept = {r.id for r in done}
            shown = {c.id: c for c in self.study.candidates(Status.DONE, with_graphs=False)
                     if c.id in kept}
        top = max((c.generation for c in shown.values()), default=0)
        labels = dict(COST_LABELS)
        plots = []
        for cost in self.costs:
            label = labels.get(cost, cost)
            points = {c.id: _point(c, cost, label, marks, top) for c in shown.values()
                      if c.accuracy is not None and cost_value(c, cost) is not None}
            ringed = sorted((i for i in cols.ids[on[cost]].tolist() if i in points),
                            key=lambda i: (points[i].x, i))
            for i in ringed:
                points[i].ring = True
            values = cols.values[cost]
            ok = np.isfinite(values) & np.isfinite(cols.accuracy)
            density = (np.column_stack([values[ok], cols.accuracy[ok]]) if large
                       else np.zeros((0, 2)))
            edges = [] if large else [(points[c.parent_id], points[c.id])
                                      for c in shown.values() if c.id in points
                                      and c.parent_id in points]
            plots.append({"cost": cost, "label": front_label(cost), "svg": scatter(
                list(points.values()), label, "validation accuracy",
                f"scatter live-front scatter-{cost}", [points[i] for i in ringed],
                edges=edges, density=density)})
        return {"plots": plots, "done": len(done), "large": large,
                "seed": seed.id if seed is not None else None,
                "recommended": rec.id if rec is not None else None}


def _unpacked(rows: Sequence[Any]) -> dict[int, np.ndarray]:
    """id -> validation correctness of the rows that have it, unpacked a group of equal
    sizes at a time (100,000 rows: one `unpackbits`, not 100,000)."""
    by_size: dict[int, list[Any]] = {}
    for r in rows:
        if r.val_bits is not None and r.val_count:
            by_size.setdefault(int(r.val_count), []).append(r)
    out: dict[int, np.ndarray] = {}
    for n, group in by_size.items():
        width = (n + 7) // 8
        if any(len(r.val_bits) != width for r in group):  # damaged: its own error line
            out.update((r.id, examples.unpack(r.val_bits, n)) for r in group)
            continue
        packed = np.frombuffer(b"".join(r.val_bits for r in group), np.uint8)
        bits = np.unpackbits(packed.reshape(len(group), width), axis=1, count=n)
        out.update(zip((r.id for r in group), bits.astype(bool), strict=True))
    return out


def _point(c: Candidate, cost: str, label: str, marks: dict[int, str], top: int) -> Point:
    value = cost_value(c, cost)
    mark = marks.get(c.id, "")
    return Point(float(value), float(c.accuracy),
                 f"candidate {c.id} (generation {c.generation}, parent {c.parent_id}"
                 + (f", {mark}" if mark else "") + f"): validation accuracy "
                 f"{val_accuracy_text(c)}, {label} {value:.4g}",
                 href=f"/candidates/{c.id}", colour=generation_colour(c.generation, top),
                 ident=str(c.id), mark=mark)
