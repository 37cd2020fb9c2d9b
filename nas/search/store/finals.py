"""The finals' runs in the study file: one row per training of the finals, written in the
same SQLite file as the candidates (its own table), so the finals are as crash-safe as the
search.

Why rows, not state: a finals run that finished is never trained again, one that was
running when the driver died trains again (resuming its own checkpoint), and a second call
on a finished study finds every run done and trains nothing. A run belongs to a recipe
(`recipe`: epochs, folds, start, seeds as JSON): runs of another recipe (the user changed
`search.finals`) are kept but not read.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from nas.io import examples
from nas.search.store.database import Database

TABLE = """
CREATE TABLE IF NOT EXISTS finals_runs (
    name TEXT PRIMARY KEY,
    candidate_id INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('finals', 'home')),
    repeat INTEGER NOT NULL,
    fold INTEGER NOT NULL,
    recipe TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    positions TEXT,
    correct TEXT,
    metrics_json TEXT,
    checkpoint_path TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    finished_at REAL
)
"""


@dataclasses.dataclass(frozen=True)
class Run:
    """One finals training: candidate `candidate_id`'s architecture, repeat `repeat`, fold
    `fold` (0 without folds); kind "home" is the recommended architecture retrained the
    way the search trained, a candidate for the model taken home."""

    name: str
    candidate_id: int
    kind: str
    repeat: int
    fold: int
    recipe: str
    status: str
    positions: np.ndarray | None  # which examples `correct` covers, in its order
    correct: np.ndarray | None  # which of them this run got right
    metrics: dict[str, Any]
    checkpoint_path: str | None
    error: str | None


def run_name(kind: str, candidate_id: int, repeat: int = 0, fold: int = 0) -> str:
    return (f"home-{candidate_id}" if kind == "home"
            else f"finals-{candidate_id}-r{repeat}-f{fold}")


class FinalsStore:
    """The finals' table of the study in `path` (the study's database file)."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self._db = Database(Path(path), read_only=read_only)
        self._ready = read_only

    def _table(self) -> None:
        if not self._ready:
            with self._db.write() as c:
                c.execute(TABLE)
            self._ready = True

    def plan(self, runs: Iterable[tuple[str, int, str, int, int, str]]) -> None:
        """Adds (name, candidate id, kind, repeat, fold, recipe) runs that are not there;
        a run of another recipe under the same name starts again as pending."""
        self._table()
        now = time.time()
        with self._db.write() as c:
            for name, cid, kind, repeat, fold, recipe in runs:
                row = c.execute("SELECT recipe FROM finals_runs WHERE name=?",
                                (name,)).fetchone()
                if row is not None and row[0] == recipe:
                    continue
                c.execute("INSERT OR REPLACE INTO finals_runs (name, candidate_id, kind, "
                          "repeat, fold, recipe, status, created_at) VALUES "
                          "(?, ?, ?, ?, ?, ?, 'pending', ?)",
                          (name, cid, kind, repeat, fold, recipe, now))

    def record(self, name: str, *, metrics: dict[str, Any] | None = None,
               positions: np.ndarray | None = None, correct: np.ndarray | None = None,
               checkpoint_path: str | None = None, error: str | None = None) -> None:
        """A run's result (done) or its error (failed), in one transaction."""
        self._table()
        status = "failed" if error is not None else "done"
        with self._db.write() as c:
            c.execute("UPDATE finals_runs SET status=?, positions=?, correct=?, metrics_json=?,"
                      " checkpoint_path=?, error=?, finished_at=? WHERE name=?",
                      (status, None if positions is None else json.dumps(
                          [int(p) for p in positions]),
                       None if correct is None else examples.to_text(correct),
                       json.dumps(metrics or {}), checkpoint_path, error, time.time(), name))

    def runs(self, recipe: str | None = None, kind: str | None = None) -> list[Run]:
        """Every run (of `recipe`, of `kind`), by name; none when the table is not there
        (a study written before the finals existed, or opened read-only before any)."""
        with self._db.read() as c:
            if c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                         "name='finals_runs'").fetchone() is None:
                return []
            rows = c.execute("SELECT name, candidate_id, kind, repeat, fold, recipe, "
                             "status, positions, correct, metrics_json, checkpoint_path, "
                             "error FROM finals_runs ORDER BY name").fetchall()
        out = []
        for row in rows:
            run = Run(row[0], int(row[1]), row[2], int(row[3]), int(row[4]), row[5], row[6],
                      None if row[7] is None else np.asarray(json.loads(row[7]), np.int64),
                      None if row[8] is None else examples.from_text(row[8]),
                      json.loads(row[9]) if row[9] else {}, row[10], row[11])
            if (recipe is None or run.recipe == recipe) and (kind is None or run.kind == kind):
                out.append(run)
        return out

    def close(self) -> None:
        self._db.close()
