"""What the driver reads per proposal, kept incrementally: finished rows' selection fields.

Why: a finished candidate never changes (the first result wins, see `Study.tell`), so the
driver reads each one once, without its graph, and keeps the done ones as arrays that
parent selection uses directly (`selection.Columns`). Per proposal it then runs a few
indexed queries (the first unfinished id, the newest id, the rows finished since) instead
of listing the study, so a proposal's bookkeeping stays flat as the study grows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.search.pareto import ParetoCurve
from nas.search.selection import COSTS, OBJECTIVES, Columns, check_cost


@dataclasses.dataclass(frozen=True)
class Finished:
    """A done candidate as selection and the progress line see it (no graph, no JSON):
    the attributes `Individual.from_candidate` and `Driver.check_size` read."""

    id: int
    parent_id: int | None
    accuracy: float
    flops: float | None = None
    params: float | None = None
    im_sec_core_train: float | None = None
    im_sec_core_infer: float | None = None
    val_examples: Any = None  # as stored in the metrics' JSON (a count, normally)
    status: str = "done"  # only done candidates are read this way

    @property
    def extra_metrics(self) -> dict[str, Any]:
        return {} if self.val_examples is None else {"val_examples": self.val_examples}


class Population(list):
    """The done candidates a proposal reads, by id, with their selection columns attached
    (`columns`), so selection needs no pass over Python objects."""

    columns: Columns


class DoneCache:
    """The done candidates of a study, read once each with indexed queries.

    `prefix` rows (ids up to the first unfinished one) are final and kept; done rows past
    it (few: at most the pipeline's depth in a driver's search) are read again each time.
    """

    def __init__(self, study: Any) -> None:
        self.study = study
        self._through = 0  # every id <= this is finished and read
        self._rows: list[Finished] = []
        self._columns: list[np.ndarray] = []  # per column, growing by concatenation
        self._tail: list[Finished] = []

    def refresh(self) -> int | None:
        """Read what finished since the last call; returns the first unfinished id (None
        when every candidate is finished)."""
        first_open = self.study.first_unfinished_id()
        end = self.study.last_id() if first_open is None else first_open - 1
        if end > self._through:
            self._append(self.study.done_rows(self._through, end))
            self._through = end
        self._tail = self.study.done_rows(self._through)
        return first_open

    def population(self, bound: int) -> Population | None:
        """Done candidates with id <= `bound`; None while one of them is unfinished."""
        first_open = self.refresh()
        if first_open is not None and first_open <= bound:
            return None
        m = int(np.searchsorted(self._columns_id(), bound, side="right"))
        out = Population(self._rows[:m])
        out.columns = self._slice(m)
        return out

    def done(self) -> list[Finished]:
        """Every done candidate read by the last `refresh`, by id."""
        return self._rows + self._tail

    def best(self) -> Finished | None:
        """The most accurate done candidate (ties: fewer FLOPs, then older), as `Study.best`."""
        inf = float("inf")
        tail = min(self._tail, key=lambda c: (-c.accuracy, _inf(c.flops), c.id), default=None)
        if not self._rows:
            return tail
        acc, flops = self._columns[1], self._columns[2 + COSTS.index("flops")]
        top = np.flatnonzero(acc == acc.max())
        cheapest = np.where(np.isnan(flops[top]), inf, flops[top])
        first = self._rows[int(top[np.argmin(cheapest)])]  # argmin: the oldest of equals
        return min((first, *([tail] if tail else [])),
                   key=lambda c: (-c.accuracy, _inf(c.flops), c.id))

    def front_size(self, cost: str = "flops") -> int:
        """How many done candidates `Study.pareto_front(cost)` lists (ties included)."""
        check_cost(cost)
        rows = self.done()
        m = len(self._rows)
        acc = np.concatenate([self._columns[1][:m] if m else np.zeros(0),
                              np.array([f.accuracy for f in self._tail], dtype=float)])
        values = np.concatenate([self._columns[2 + COSTS.index(cost)][:m] if m
                                 else np.zeros(0),
                                 np.array([_nan(getattr(f, cost)) for f in self._tail],
                                          dtype=float)])
        keep = ~np.isnan(values)
        if not keep.any() or len(rows) == 0:
            return 0
        points = np.stack([acc[keep], values[keep]], axis=1)
        curve = ParetoCurve(points, (True, OBJECTIVES[cost]))
        # A point equal to a curve point finds it as the last one at least as good in the
        # first objective (the curve descends strictly in it).
        std = curve.standardize(points)
        reach = np.searchsorted(-curve.curve[:, 0], -std[:, 0], side="right")
        nearest = curve.curve[np.maximum(reach - 1, 0)]
        return int(np.sum((reach > 0) & np.all(nearest == std, axis=1)))

    # ---------------------------------------------------------------- internals

    def _append(self, rows: Sequence[Finished]) -> None:
        if not rows:
            return
        self._rows.extend(rows)
        new = [np.array([f.id for f in rows], dtype=np.int64),
               np.array([f.accuracy for f in rows], dtype=float),
               *[np.array([_nan(getattr(f, c)) for f in rows], dtype=float) for c in COSTS],
               np.array([_size(f.val_examples) for f in rows], dtype=float)]
        self._columns = new if not self._columns else [
            np.concatenate([old, add]) for old, add in zip(self._columns, new, strict=True)]

    def _columns_id(self) -> np.ndarray:
        return self._columns[0] if self._columns else np.zeros(0, dtype=np.int64)

    def _slice(self, m: int) -> Columns:
        if not self._columns:
            empty = np.zeros(0)
            return Columns(np.zeros(0, dtype=np.int64), empty, dict.fromkeys(COSTS, empty),
                           empty)
        ids, acc, *costs, examples = (c[:m] for c in self._columns)
        return Columns(ids, acc, dict(zip(COSTS, costs, strict=True)), examples)


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _inf(value: float | None) -> float:
    return float("inf") if value is None else value


def _size(value: Any) -> float:
    """A sample size as selection reads it (`int(n)`), NaN when unknown (falsy)."""
    return float(int(value)) if value else float("nan")
