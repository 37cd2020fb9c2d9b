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
from typing import Any

from nas.search.store.candidate import EMPTY_INHERITANCE, Inheritance

# Where a proposal was refused: "start": its child could not start near its parent (in a
# worker, or found by the driver before the child was added); "move": the move raised.
STAGES = ("start", "move")

COLUMNS = ("id", "proposal", "candidate_id", "parent_id", "kind", "stage", "cause",
           "slot_refusals", "replaced_by", "worker", "recorded_at")
SELECT = f"SELECT {', '.join(COLUMNS)} FROM refusals"


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


def insert(c: sqlite3.Connection, **values: Any) -> int:
    """Records one refusal (`Refusal`'s fields but id, replaced_by and recorded_at) in
    transaction `c`; returns its id."""
    cur = c.execute(
        "INSERT INTO refusals(proposal, candidate_id, parent_id, kind, stage, cause,"
        " slot_refusals, worker, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (values["proposal"], values["candidate_id"], values["parent_id"], values["kind"],
         values["stage"], str(values["cause"])[:2000], int(values["slot_refusals"]),
         values["worker"], time.time()))
    return int(cur.lastrowid)


def read(c: sqlite3.Connection, refusal_id: int) -> Refusal:
    row = c.execute(SELECT + " WHERE id=?", (refusal_id,)).fetchone()
    return Refusal(*row)


def has_table(c: sqlite3.Connection) -> bool:
    """Whether the study has the refusals table (a read-only opener of an older study may
    not: it then has none)."""
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='refusals'"
                     ).fetchone() is not None


def inheritance_of(text: str | None) -> Inheritance:
    """The record of a row's `inheritance_json`; a damaged one counts as none, so that a
    refusal is still recorded."""
    try:
        return Inheritance.from_json(json.loads(text) if text else None)
    except ValueError:
        return EMPTY_INHERITANCE
