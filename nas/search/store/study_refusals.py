"""Refused proposals: children that could not start near their parent, and moves that raised.

A refused proposal is not a candidate. A child refused at its start in a worker (its start
accuracy below `search.max_start_drop`, a fit above `search.fit.max_error`, a constant
output) leaves the candidates table in the transaction that records its refusal here, so
it takes none of `search.max_candidates`, and the driver proposes another child in its
place (`open_refusal`, `add(replaces=...)`). A slot whose proposals were refused
`search.max_refusals` times fails with its last cause instead, so a search that cannot
start any child ends. Refusals before a candidate existed (a move that raised, a constant
output found by the driver) are recorded with the proposal counter that moved past them,
in one transaction, so a driver killed at any moment records each once.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from nas.search.store.candidate import EMPTY_INHERITANCE, Inheritance
from nas.search.store.study_writes import StudyWrites
from nas.search.strategy.settings import MAX_REFUSALS

# Where a proposal was refused: "start": its child could not start near its parent (in a
# worker, or found by the driver before the child was added); "move": the move raised.
STAGES = ("start", "move")


_COLUMNS = ("id", "proposal", "candidate_id", "parent_id", "kind", "stage", "cause",
            "slot_refusals", "replaced_by", "worker", "recorded_at")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One refused proposal. `candidate_id`: the id its child had (None when it was refused
    before it was added); `slot_refusals`: how many proposals its slot has had refused,
    this one included; `replaced_by`: the candidate proposed in its place."""

    id: int
    proposal: int | None
    candidate_id: int | None
    parent_id: int | None
    kind: str | None
    stage: str
    cause: str
    slot_refusals: int
    replaced_by: int | None
    worker: str | None
    recorded_at: float


class StudyRefusals(StudyWrites):
    """`Study.refuse`, `record_refusal`, `refusals`, `open_refusal`, `refusal_counts`."""

    @property
    def max_refusals(self) -> int:
        """`search.max_refusals` of the study's config (its default where it has none)."""
        search = self.config.get("search") if isinstance(self.config, Mapping) else None
        value = (search or {}).get("max_refusals", MAX_REFUSALS)
        return MAX_REFUSALS if value is None else int(value)

    def refuse(self, candidate_id: int, cause: str, *, worker: str | None = None
               ) -> Refusal | None:
        """Records that a claimed child could not start near its parent (`cause`, one line).

        Its row leaves the candidates table and the refusal is returned; or, when its slot
        already had `max_refusals` proposals refused, it fails with a line naming the cause
        (None). Like `fail`, a no-op (None) on a finished candidate or one that `worker` no
        longer holds."""
        with self._db.write() as c:
            if not self._may_record(c, candidate_id, "refusal", worker):
                return None
            row = c.execute("SELECT parent_id, inheritance_json FROM candidates WHERE id=?",
                            (candidate_id,)).fetchone()
            inheritance = _inheritance(row[1])
            before = inheritance.slot_refusals or 0
            limit = self.max_refusals
            if before + 1 > limit:
                line = (f"its slot's proposals were refused at their start {before + 1} "
                        f"time(s) (search.max_refusals={limit}); the last: {cause}")
                c.execute("UPDATE candidates SET status='failed', error=?, finished_at=?,"
                          " lease_until=NULL WHERE id=?", (line, time.time(), candidate_id))
                return None
            refusal_id = self._insert(c, proposal=inheritance.proposal,
                                      candidate_id=candidate_id, parent_id=row[0],
                                      kind=inheritance.kind, stage="start",
                                      cause=cause, slot_refusals=before + 1, worker=worker)
            for table in ("examples", "rungs"):  # nothing refers to the row any more
                c.execute(f"DELETE FROM {table} WHERE candidate_id=?", (candidate_id,))
            c.execute("DELETE FROM candidates WHERE id=?", (candidate_id,))
            return self._refusal(c, refusal_id)

    def record_refusal(self, *, stage: str, cause: str, kind: str | None = None,
                       proposal: int | None = None, parent_id: int | None = None,
                       state: Mapping[str, Any] | None = None) -> Refusal:
        """Records a proposal refused before its child was added (a move that raised, a
        constant output), with `state` (the driver's counters) in the same transaction."""
        if stage not in STAGES:
            raise ValueError(f"stage: expected one of {STAGES}, got {stage!r}")
        rows = self._state_rows(state)
        with self._db.write() as c:
            refusal_id = self._insert(c, proposal=proposal, candidate_id=None,
                                      parent_id=parent_id, kind=kind, stage=stage,
                                      cause=cause, slot_refusals=0, worker=None)
            c.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", rows)
            return self._refusal(c, refusal_id)

    def refusals(self, stage: str | None = None) -> list[Refusal]:
        """The refused proposals (of one `stage`, or all), oldest first."""
        where, args = ("", ()) if stage is None else (" WHERE stage=?", (stage,))
        with self._db.read() as c:
            if not _has_table(c):
                return []
            rows = c.execute(f"SELECT {', '.join(_COLUMNS)} FROM refusals{where} ORDER BY id",
                             args).fetchall()
        return [Refusal(*row) for row in rows]

    def open_refusal(self, through: int) -> Refusal | None:
        """The oldest child refused at its start, with an id up to `through`, that nothing
        was proposed in place of yet (None: none). Why `through`: the driver's next
        proposal reads the results up to that id, whatever the workers' timing, so the slot
        it fills is decided by counts too."""
        with self._db.read() as c:
            if not _has_table(c):
                return None
            row = c.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM refusals WHERE replaced_by IS NULL AND"
                " candidate_id IS NOT NULL AND candidate_id <= ? ORDER BY candidate_id"
                " LIMIT 1", (int(through),)).fetchone()
        return None if row is None else Refusal(*row)

    def refusal_counts(self) -> dict[str, dict[str, int]]:
        """{stage: {move kind: refused proposals}}, every stage present."""
        out: dict[str, dict[str, int]] = {s: {} for s in STAGES}
        with self._db.read() as c:
            if not _has_table(c):
                return out
            for stage, kind, n in c.execute(
                    "SELECT stage, COALESCE(kind, '?'), COUNT(*) FROM refusals"
                    " GROUP BY stage, kind ORDER BY stage, kind"):
                out.setdefault(stage, {})[kind] = int(n)
        return out

    # ---------------------------------------------------------------- internals

    @staticmethod
    def _insert(c: sqlite3.Connection, **values: Any) -> int:
        cur = c.execute(
            "INSERT INTO refusals(proposal, candidate_id, parent_id, kind, stage, cause,"
            " slot_refusals, worker, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (values["proposal"], values["candidate_id"], values["parent_id"], values["kind"],
             values["stage"], str(values["cause"])[:2000], int(values["slot_refusals"]),
             values["worker"], time.time()))
        return int(cur.lastrowid)

    @staticmethod
    def _refusal(c: sqlite3.Connection, refusal_id: int) -> Refusal:
        row = c.execute(f"SELECT {', '.join(_COLUMNS)} FROM refusals WHERE id=?",
                        (refusal_id,)).fetchone()
        return Refusal(*row)


def _has_table(c: sqlite3.Connection) -> bool:
    """Whether the study has the refusals table (a read-only opener of an older study may
    not: it then has none)."""
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='refusals'"
                     ).fetchone() is not None


def _inheritance(text: str | None) -> Inheritance:
    """The record of a row's `inheritance_json`; a damaged one counts as none, so that a
    refusal is still recorded."""
    try:
        return Inheritance.from_json(json.loads(text) if text else None)
    except ValueError:
        return EMPTY_INHERITANCE
