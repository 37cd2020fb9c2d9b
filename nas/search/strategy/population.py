"""What the driver reads per proposal, kept incrementally: finished rows' selection fields.

Why: a finished candidate never changes (`Study.tell`), so the driver reads each once,
without its graph, into the arrays selection uses (`selection.Columns`), and per proposal
runs a few indexed queries instead of listing the study.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from nas.search.strategy.pareto import Front
from nas.search.strategy.selection import (
    Columns,
    GrowingColumns,
    check_cost,
    cost_columns,
    higher_better,
    pool_costs,
    size_column,
)


@dataclasses.dataclass(frozen=True)
class Finished:
    """A done candidate as selection and the progress line see it (no graph, no JSON)."""

    id: int
    parent_id: int | None
    accuracy: float
    flops: float | None = None
    params: float | None = None
    im_sec_core_train: float | None = None
    im_sec_core_infer: float | None = None
    val_examples: Any = None  # as stored in the metrics' JSON (a count, normally)
    status: str = "done"  # only done candidates are read this way
    val_count: int | None = None  # per-example validation results: how many examples
    val_bits: bytes | None = None  # and which were right (`nas.io.examples.pack`)
    # the search's own costs (`search.costs`) as stored in the metrics' JSON, by name
    user_costs: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def extra_metrics(self) -> dict[str, Any]:
        out = dict(self.user_costs)
        if self.val_examples is not None:
            out["val_examples"] = self.val_examples
        return out


class Population(Sequence[Finished]):
    """The done candidates a proposal reads, by id, with their selection `columns`: a view
    of the first `count` of a list that only grows (no copy per proposal)."""

    def __init__(self, rows: list[Finished], columns: Columns, count: int | None = None
                 ) -> None:
        self._rows = rows
        self._count = len(rows) if count is None else count
        self.columns = columns

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self._rows[: self._count][i]
        if not -self._count <= i < self._count:
            raise IndexError(i)
        return self._rows[i % self._count]

    def __iter__(self) -> Iterator[Finished]:
        return itertools.islice(self._rows, self._count)

    def without(self, ids: Collection[int]) -> Population:
        if not ids:
            return self
        return Population([c for c in self if c.id not in ids],
                          self.columns.take(~np.isin(self.columns.ids, list(ids))))


class DoneCache:
    """The done candidates of a study, read once each with indexed queries: rows up to the
    first unfinished id are kept, the few done past it read again each time. `user_costs`:
    columns beside the built-in costs (default: `Study.user_costs`)."""

    def __init__(self, study: Any, user_costs: Sequence[str] | None = None) -> None:
        self.study = study
        self.user_costs = tuple(getattr(study, "user_costs", ()) if user_costs is None
                                else user_costs)
        self._through = 0  # every id <= this is finished and read
        self._rows: list[Finished] = []
        self._columns = GrowingColumns(pool_costs(self.user_costs))  # of `_rows`
        self._tail: list[Finished] = []
        self._best: Finished | None = None  # of `_rows`
        self._fronts: dict[str, tuple[Front, int]] = {}  # of the first rows, by cost

    def refresh(self) -> int | None:
        """Read what finished since the last call; the first unfinished id (None: none)."""
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
        columns = self._columns.columns
        m = int(np.searchsorted(columns.ids, bound, side="right"))
        return Population(self._rows, columns.take(slice(0, m)), m)

    def done(self) -> list[Finished]:
        """Every done candidate read by the last `refresh`, by id."""
        return self._rows + self._tail

    def any_done(self) -> bool:
        """Whether the last `refresh` found a done candidate."""
        return bool(self._rows or self._tail)

    def best(self) -> Finished | None:
        """The most accurate done candidate (ties: fewer FLOPs, then older), as `Study.best`."""
        return min([*([self._best] if self._best else []), *self._tail], key=best_order,
                   default=None)

    def front_size(self, cost: str = "flops") -> int:
        """How many done candidates lie on the accuracy/`cost` front, ties with a front
        point included: `Study.pareto_front`'s count, but a measured cost's values are read
        as measured, not tied within their spread."""
        return self._front(cost).size

    def front_points(self, cost: str = "flops") -> list[tuple[float, float]]:
        """The (accuracy, cost) points of that front."""
        return self._front(cost).points

    def _front(self, cost: str) -> Front:
        """The kept rows' front, with the rows since and the tail."""
        check_cost(cost, user_costs=self.user_costs)
        front, counted = self._fronts.get(cost) or (Front(higher_better(cost)), 0)
        _extend(front, self._rows[counted:], cost)
        self._fronts[cost] = (front, len(self._rows))
        front = front.copy()
        _extend(front, self._tail, cost)
        return front

    def _append(self, rows: Sequence[Finished]) -> None:
        if not rows:
            return
        self._rows.extend(rows)
        self._best = min([*([self._best] if self._best else []), *rows], key=best_order)
        self._columns.extend(Columns(
            np.array([f.id for f in rows], dtype=np.int64),
            np.array([f.accuracy for f in rows], dtype=float),
            cost_columns(rows, pool_costs(self.user_costs)),
            size_column([f.val_examples for f in rows]),
            np.array([f.val_count or 0 for f in rows], dtype=np.int64),
            _bit_rows([f.val_bits for f in rows])))


def best_order(c: Any) -> tuple[float, float, int]:
    """What `Study.best` sorts by: the most accurate first, then fewer FLOPs, then older."""
    return (-c.accuracy, float("inf") if c.flops is None else c.flops, c.id)


def _extend(front: Front, rows: Sequence[Finished], cost: str) -> None:
    front.extend(np.array([r.accuracy for r in rows], dtype=float),
                 cost_columns(rows, (cost,))[cost])


def _bit_rows(packed: Sequence[bytes | None]) -> np.ndarray:
    """Packed results as a (rows, bytes) array, zeros where a row has none."""
    width = max((len(b) for b in packed if b), default=0)
    out = np.zeros((len(packed), width), dtype=np.uint8)
    for i, b in enumerate(packed):
        if b:
            out[i, : len(b)] = np.frombuffer(b, np.uint8)
    return out
