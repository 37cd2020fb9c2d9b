"""The rows of a study as `Candidate`s: the SELECT statements and the reads that every
part of `Study` shares (`StudyRows`, the base of its parts).

Why apart: `Study` is split by what it does (`study_writes`, `study_leases`,
`study_queries`, `study_examples`, the opening in `study`); each part reads candidates the
same way, so that way lives below them all.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas.search.store.candidate import (
    COLUMNS,
    RUNG_COLUMNS,
    STATUSES,
    Candidate,
    candidate_from_row,
)
from nas.search.store.database import Database

SELECT = f"SELECT {', '.join(COLUMNS)} FROM candidates"
LARGE = {"graph_json": "''", "spec_json": "NULL", "properties_json": "NULL",
         "inheritance_json": "NULL", "blocks_json": "NULL"}
SELECT_METRICS = (f"SELECT {', '.join(LARGE.get(c, c) for c in COLUMNS)} "
                  f"FROM candidates")
SELECT_RUNGS = f"SELECT {', '.join(RUNG_COLUMNS)} FROM rungs"
STATE_PREFIX = "state:"
LIGHT_COSTS = ("flops", "params", "im_sec_core_train", "im_sec_core_infer")


class StudyRows:
    """What every part of a `Study` stands on: its file, its config, candidate reads."""

    workdir: Path
    path: Path
    config: dict[str, Any]
    _db: Database
    _counted: bool  # the file keeps its status counts (`_schema.STATUS_COUNTS`)

    @property
    def user_costs(self) -> tuple[str, ...]:
        """The names of the costs measured in the worker (the keys of `search.costs` in its
        config, and `latency_ms` where it is timed: `settings.measured_costs`): numbers in
        each done candidate's metrics, lower is better, which fronts and the recommendation
        may rank by like the built-in costs."""
        from nas.search.strategy.settings import measured_costs

        search = self.config.get("search") if isinstance(self.config, Mapping) else None
        return tuple(k for k in measured_costs(search) if k.isidentifier())

    def _get(self, c: sqlite3.Connection, candidate_id: int) -> Candidate:
        row = c.execute(SELECT + " WHERE id=?", (candidate_id,)).fetchone()
        if row is None:
            raise ValueError(f"candidate_id: no candidate {candidate_id!r} in {self.path}")
        return self._with_rungs(candidate_from_row(row, self.path),
                                self._rungs(c, candidate_id))

    @staticmethod
    def _rungs(c: sqlite3.Connection, candidate_id: int | None,
               among: tuple[str, list[Any]] | str = "") -> dict[int, list[dict[str, Any]]]:
        """Recorded rung results by candidate id (of one candidate, of those the `among`
        query (SQL, arguments) selects, or all)."""
        where, args = ("", ()) if candidate_id is None else (" WHERE candidate_id=?",
                                                             (candidate_id,))
        if among:
            where, args = f" WHERE candidate_id IN ({among[0]})", tuple(among[1])
        out: dict[int, list[dict[str, Any]]] = {}
        for row in c.execute(SELECT_RUNGS + where + " ORDER BY candidate_id, rung", args):
            entry = dict(zip(RUNG_COLUMNS, row, strict=True))
            out.setdefault(entry.pop("candidate_id"), []).append(entry)
        return out

    @staticmethod
    def _with_rungs(candidate: Candidate, rungs: dict[int, list[dict[str, Any]]]) -> Candidate:
        found = rungs.get(candidate.id)
        return dataclasses.replace(candidate, rungs=tuple(found)) if found else candidate

    def _status(self, c: sqlite3.Connection, candidate_id: int) -> str:
        row = c.execute("SELECT status FROM candidates WHERE id=?", (candidate_id,)).fetchone()
        if row is None:
            raise ValueError(f"candidate_id: no candidate {candidate_id!r} in {self.path}")
        return row[0]


def json_path(name: str) -> str:
    """The JSON path of a user's cost in `metrics_json` (an identifier: quoted as is)."""
    return f'$."{name}"'


def rung_cost(cost: str) -> str:
    """The rungs-table column a promotion ranks by (only costs the table records)."""
    return cost if cost in ("flops", "params") else "NULL"


def check_status(status: str) -> str:
    """`status` if it is one a candidate can have; else a ValueError naming it."""
    if status not in STATUSES:
        raise ValueError(f"status: unknown status {status!r}; expected one of {STATUSES}")
    return status
