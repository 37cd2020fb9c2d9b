"""The finals: after the search's last candidate, the finalists and the seed train alike.

Why: a child inherited its lineage's training and was compared with a seed that trained
less, on one small validation split. Here each finalist and the seed train the same
`Recipe`, `repeats` times (each with its own initialization and data order), as a k-fold
cross-validation when data are small, for a fixed count of epochs. Then the recommended
architecture trains once more as the search trained it (the "home" run); the user takes
home whichever of that model and the search's own weights is more accurate on validation.

Each run is a `Task` on the search's executor, recorded in the study's finals table: a run
that finished is never trained again, one cut short resumes from its own checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Any

import ml_collections
import numpy as np
from tqdm.auto import tqdm

from nas.io import examples
from nas.search.execution import tensorboard_runs
from nas.search.execution.task import Executor, Outcome, Task
from nas.search.store.candidate import Status
from nas.search.store.finals import FINALS_STATE, FinalsStore, answer, repeats_of, run_name
from nas.search.store.study import Study
from nas.search.strategy.finals_rules import Run, choose_finalists
from nas.search.strategy.recommend import (
    Comparisons,
    constraints,
    margin_pt,
    recommend_cost,
    seed_of,
)
from nas.search.strategy.settings import (
    Recipe,
    SearchSettings,
    decision_config,
    recipe,
    repeats_the_search,
    trained_repeats,
)
from nas.train import data as data_lib
from nas.train.checkpoint import load_variables, save_variables


class Finals:
    """The finals of a study: which runs are left, their tasks, their results."""

    def __init__(self, study: Study, train: ml_collections.ConfigDict,
                 search: SearchSettings, functions: bytes | None = None) -> None:
        self.study, self.train, self.search = study, train, search
        self.config = search.finals
        self.functions = functions
        self.decision = decision_config(train, search)
        self.store = FinalsStore(study.path)

    @functools.cached_property
    def recipe(self) -> Recipe:
        inp = ml_collections.ConfigDict(self.decision.input.to_dict())
        inp.data.validation_fraction = 0.0
        images = data_lib.split_size(inp, inp.data.split, inp.data_dir or None)
        seed = seed_of(self.study.candidates(Status.DONE, with_graphs=False))
        return recipe(self.config, self.train.to_dict(), self.search, images,
                      seed.metrics if seed is not None else None)

    def plan(self) -> list[Run]:
        """Plans the finals runs, then the take-home run; the runs still to train."""
        if not self.config.on:
            return []
        before = self.study.get_state(FINALS_STATE, None) or {}
        key = self.recipe.to_json()
        done = self.study.candidates(Status.DONE, with_graphs=False)
        settings = {"recipe": key, "repeats": self.config.repeats, "k": self.config.k,
                    "candidates": len(done)}
        state = dict(before)
        if any(state.get(name) != value for name, value in settings.items()):
            config = self.study.config
            finalists = choose_finalists(done, Comparisons.of(self.study), self.config.k,
                                         margin_pt(config), recommend_cost(config),
                                         constraints(config))
            state = {**settings, "finalists": [c.id for c in finalists],
                     "wall_s": float(state.get("wall_s", 0.0)),
                     "trained_repeats": trained_repeats(self.config, len(finalists) - 1,
                                                        self.recipe.folds)}
        # every setting, so that a resumed search with other finals settings runs them
        state["settings"] = dataclasses.asdict(self.config)
        if state != before:
            state["complete"] = False
            self.study.set_state(FINALS_STATE, state)
        repeats = repeats_of(state)
        planned = [(run_name("finals", cid, r, f), cid, "finals", r, f, key)
                   for cid in state["finalists"] for r in range(repeats)
                   for f in range(self.recipe.folds)]
        self.store.plan(planned)
        wanted = {p[0] for p in planned}
        left = [r for r in self.store.runs(key, kind="finals")
                if r.name in wanted and r.status == "pending"]
        if left or not self.config.take_home:
            return left
        found = answer(self.study)
        chosen = found.recommendation.candidate
        if found.table is None or chosen is None or repeats_the_search(
                self.recipe, chosen, self.train.to_dict(), self.search.seed_epochs):
            return []
        self.store.plan([(run_name("home", chosen.id), chosen.id, "home", 0, 0, key)])
        return [r for r in self.store.runs(key, kind="home")
                if r.candidate_id == chosen.id and r.status == "pending"]

    def finish(self, seconds: float, complete: bool) -> None:
        """Adds `seconds` of finals wall time to the study and marks the finals
        `complete` (nothing left to train for these candidates)."""
        state = dict(self.study.get_state(FINALS_STATE, None) or {})
        if state:
            state["wall_s"] = float(state.get("wall_s", 0.0)) + seconds
            state["complete"] = complete
            self.study.set_state(FINALS_STATE, state)

    def task(self, run: Run) -> Task:
        """The task that trains `run`: the recipe, its repeat's seed, its fold held out
        (taken home: the search's splits, the test split reported)."""
        candidate = self.study.get(run.candidate_id)
        config = ml_collections.ConfigDict(self.decision.to_dict())
        rec = self.recipe
        config.seed = rec.seed + run.repeat
        config.total_epochs = self.epochs(candidate)
        # scored once, at its end: no decision reads an earlier evaluation, and on small
        # data the per-epoch ones cost an eighth of the run
        config.eval.every_epochs = max(1, math.ceil(config.total_epochs))
        if self.search.log_every_steps > 0:
            config.log_training_steps = self.search.log_every_steps
        if run.kind == "finals":
            if rec.folds > 1:
                config.input.data.validation_fraction = 0.0
                config.input.data.folds = rec.folds
                config.input.data.fold = run.fold
                config.input.data.fold_seed = fold_seed(rec, run.repeat)
                config.eval.data.split = data_lib.FOLD
            config.eval.test_split = ""  # what the finals decide on never reads test
        init = (load_variables(candidate.checkpoint_path) if rec.start == "weights"
                and candidate.checkpoint_path else None)
        return Task(candidate.id, config.to_dict(), candidate.graph_json, init,
                    time_limit_s=self.search.time_limit_s,
                    workdir=os.path.join(self.folder(run), "train"),
                    functions=self.functions, run=run.name,
                    tensorboard=(tensorboard_runs.finals_run(str(self.study.workdir), run.name)
                                 if self.search.tensorboard else None))

    def epochs(self, candidate: Any) -> float:
        """A run's epochs: the recipe's; from weights, what brings the candidate's lineage
        to the most trained finalist's plus the recipe's."""
        if self.recipe.start != "weights":
            return self.recipe.epochs
        state = self.study.get_state(FINALS_STATE, None) or {}
        most = max((self.lineage_epochs(self.study.get(i)) for i in state.get("finalists", [])),
                   default=0.0)
        return most + self.recipe.epochs - self.lineage_epochs(candidate)

    def lineage_epochs(self, candidate: Any) -> float:
        """Epochs the candidate's weights trained, its ancestors' included."""
        total = 0.0
        while candidate is not None:
            total += float(candidate.epochs or 0.0)
            candidate = (self.study.get(candidate.parent_id)
                         if candidate.parent_id is not None else None)
        return total

    def folder(self, run: Run) -> str:
        return os.path.join(str(self.study.workdir), "finals", run.name)

    def record(self, outcome: Outcome) -> None:
        """Writes a run's result (which examples it got right, and where they sit in the
        split; a take-home run's weights) or its error."""
        run = next(r for r in self.store.runs(self.recipe.to_json()) if r.name == outcome.run)
        if outcome.error is not None:
            self.store.record(run.name, error=outcome.error)
            return
        metrics = dict(outcome.metrics or {})
        correct = examples.from_text(metrics.pop("val_correct")) \
            if "val_correct" in metrics else None
        path = None
        if run.kind == "home":
            path = save_variables(os.path.join(self.folder(run), "final"),
                                  outcome.variables or {})
        self.store.record(run.name, metrics=metrics, correct=correct,
                          positions=self.positions(run, correct), checkpoint_path=path)

    def positions(self, run: Run, correct: np.ndarray | None) -> np.ndarray | None:
        """Where the run's predictions sit in the training split, else in split order."""
        if correct is None:
            return None
        if run.kind == "finals" and self.recipe.folds > 1:
            inp = self.decision.input
            data_dir = data_lib.resolve_data_dir(inp.data_dir or None)
            source = data_lib.open_source(inp.data.name, inp.data.split, data_dir)
            labels = data_lib.split_labels(inp.data.name, inp.data.split, data_dir, source)
            return data_lib.fold_indices(labels, self.recipe.folds, run.fold,
                                         fold_seed(self.recipe, run.repeat))
        return np.arange(correct.size)

    def close(self) -> None:
        self.store.close()


def run_finals(finals: Finals, executor: Executor, progress: bool = True) -> None:
    """Trains every run `finals` still needs on `executor`, recording each as it ends."""
    if not finals.config.on:
        finals.close()
        return
    start = time.monotonic()
    inflight: set[str | None] = set()
    left = finals.plan()  # planned again only when a result came in: it reads the study
    try:
        with tqdm(desc="finals", unit="run", disable=not progress) as bar:
            while left or inflight:
                bar.total = bar.n + len(left) + len(inflight)
                while left and executor.running() < executor.capacity:
                    run = left.pop(0)
                    executor.submit(finals.task(run))
                    inflight.add(run.name)
                outcomes = executor.poll(timeout=1.0)
                for outcome in outcomes:
                    finals.record(outcome)
                    inflight.discard(outcome.run)
                    bar.update(1)
                if outcomes:
                    left = [r for r in finals.plan() if r.name not in inflight]
        finals.finish(time.monotonic() - start, complete=True)
    except BaseException:
        finals.finish(time.monotonic() - start, complete=False)
        raise
    finally:
        finals.close()


def fold_seed(rec: Recipe, repeat: int) -> int:
    """Repeat `repeat`'s fold assignment: the same for every architecture, so their
    predictions pair."""
    return int(np.random.SeedSequence([rec.fold_seed, repeat]).generate_state(1)[0])
