"""The finals in the study file, one row per training in its own table, so they are as
crash-safe as the search; and the study's answer read from them (`answer`) by the rules
of `nas.search.strategy.finals_rules`.

Why rows, not state: a run that finished is never trained again, one that was running
when the driver died trains again (resuming its own checkpoint), and a second call on a
finished study trains nothing. A run belongs to a recipe (its JSON): runs of another
recipe (the user changed `search.finals`) are kept but not read.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nas.io import examples
from nas.search.store.candidate import Status
from nas.search.store.database import Database
from nas.search.strategy.finals_rules import (
    FinalsTable,
    Run,
    TakeHome,
    decide,
    table,
    take_home_choice,
)
from nas.search.strategy.recommend import (
    Comparisons,
    Recommendation,
    margin_pt,
    recommend_cost,
    recommend_for,
)
from nas.search.strategy.settings import FinalsConfig, Recipe, repeats_the_search, stored_value
from nas.stats import paired

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


FINALS_STATE = "finals"  # study state: {"recipe", "finalists", "repeats", "wall_s", ...}


def repeats_of(state: Mapping[str, Any]) -> int:
    """The repeats the finals of `state` train (`trained_repeats`; an older study: those
    asked)."""
    return int(state.get("trained_repeats") or state["repeats"])


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a study recommends: from the finals once they are complete, else from the
    search alone (`search_pick`); `note` says which, and why when not the finals."""

    recommendation: Recommendation
    search_pick: Recommendation
    table: FinalsTable | None
    home: dict[int, Run]  # the finals' retrains of recommended architectures, by id
    note: str
    take_home: TakeHome | None = None  # what `--id=recommended` gives (None: no finals)


def finals_finished(study: Any, finals: FinalsConfig | None = None) -> bool:
    """Whether the study needs no more finals training: they are off, or they ran to the
    end for the candidates there are now and for these settings (`finals`: a resumed
    search's `search.finals`; None: the stored ones)."""
    config = getattr(study, "config", None) or {}
    wanted = finals if finals is not None else FinalsConfig.from_dict(
        stored_value(config, "finals"), "search.finals.")
    if not wanted.on:
        return True
    state = study.get_state(FINALS_STATE, None) or {}
    ran = state.get("settings")
    same = (ran == dataclasses.asdict(wanted) if ran is not None else  # an older study's
            (state.get("k"), state.get("repeats")) == (wanted.k, wanted.repeats))
    return bool(state.get("complete")) and same and state.get("candidates") == len(
        study.candidates(Status.DONE, with_graphs=False))


def search_complete(study: Any, max_candidates: int, finals: FinalsConfig | None = None,
                    counts: Mapping[str, int] | None = None) -> bool:
    """Whether a search of `study` to `max_candidates` has nothing left to do: that many
    candidates finished (`Study.finished_count`, of `counts` where given) and its finals
    ran (`finals_finished`, for `finals`)."""
    return study.finished_count(counts) >= max_candidates and finals_finished(study, finals)


def answer(study: Any, pairs: Comparisons | None = None) -> Answer:
    """The study's recommendation, read from its finals where they are complete (`pairs`:
    the study's comparisons, when the caller has them already)."""
    config = getattr(study, "config", None)
    margin, cost = margin_pt(config), recommend_cost(config)
    done = study.candidates(Status.DONE, with_graphs=False)
    pairs = pairs if pairs is not None else Comparisons.of(study)
    pick = recommend_for(done, pairs, config)
    state = study.get_state(FINALS_STATE, None)
    if not state:  # off, or not started: the search's own answer, no finals text
        return Answer(pick, pick, None, {}, "")
    recipe = Recipe(**json.loads(state["recipe"]))
    store = FinalsStore(study.path, read_only=True)
    try:
        by_id = {c.id: c for c in done}
        finalists = [i for i in state["finalists"] if i in by_id]
        found = table(store.runs(recipe.to_json(), kind="finals"), by_id, recipe,
                      repeats_of(state), finalists, state.get("wall_s"))
        home = {r.candidate_id: r for r in store.runs(recipe.to_json(), kind="home")
                if r.status == "done"}
    finally:
        store.close()
    if found is None or not found.rows:
        return Answer(pick, pick, found, home, "the finals are not complete")
    if pick.bounds and pick.candidate is None:  # nothing within the bounds: none, as said
        return Answer(pick, pick, found, home, "")
    chosen = decide(found, margin, cost, pick, pick.bounds)
    seed = found.rows[0].candidate
    if chosen.candidate is None:
        return Answer(chosen, pick, found, home, "")
    repeated = repeats_the_search(recipe, chosen.candidate, (config or {}).get("train") or {},
                                  stored_value(config, "seed_epochs"))
    kept = take_home_choice(chosen.candidate, home.get(chosen.candidate.id), repeated,
                            pairs.validation.get(chosen.candidate.id))
    mine = kept.test_correct if kept.run is not None else pairs.test.get(chosen.candidate.id)
    theirs = pairs.test.get(seed.id)
    compared = paired.comparable(mine, theirs) and (chosen.candidate.id != seed.id
                                                    or kept.run is not None)
    test = paired.compare(mine, theirs) if compared else None
    return Answer(dataclasses.replace(chosen, test=test), pick, found, home, "", kept)
