"""The one task protocol: what a worker needs to train one thing (`Task`, plain picklable
data), what comes back (`Outcome`), who runs it (`Executor`), and how the holder of the
claim records it. Why one: a candidate, a rung and a finals run all train the same way.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

import ml_collections
import numpy as np
from absl import logging

from nas.search.execution import tensorboard_runs
from nas.search.store.candidate import Status
from nas.search.store.study import Study
from nas.search.strategy import hparams as hparams_lib
from nas.search.strategy.fidelity import RungPlan
from nas.search.strategy.settings import SearchSettings, candidate_train_config, seed_rounds
from nas.train import fit as fit_lib
from nas.train.checkpoint import load_variables, save_variables
from nas.train.config import base_config


@dataclasses.dataclass(frozen=True)
class Task:
    """Everything a worker needs to train one candidate, or one finals run (`run`) of it.
    `workdir` holds its checkpoints, so a run started again resumes; `fit`: what the new
    ops are fitted with first; `functions`: the user's own, by value."""

    candidate_id: int
    train_config: dict[str, Any]
    graph_json: str = dataclasses.field(repr=False)
    init_variables: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    time_limit_s: float = 0.0
    workdir: str | None = None
    stop_epochs: float | None = None
    fit: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    costs: dict[str, str] = dataclasses.field(default_factory=dict)
    functions: bytes | None = dataclasses.field(default=None, repr=False)
    latency: dict[str, Any] | None = None  # `nas.train.latency.LatencySettings`; None: untimed
    # `nas.train.rounds.Rounds` fields: a search's seed trains on while it gains; None: once
    rounds: dict[str, Any] | None = None
    run: str | None = None
    # a child's start below this is not trained (`search.max_start_drop`); None: no bound
    min_start_accuracy: float | None = None
    # the TensorBoard run folder its curves are mirrored to (`search.tensorboard`); None: off
    tensorboard: str | None = None

    def replace(self, **changes: Any) -> Task:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What training a task gave: metrics and weights, or an error (one line)."""

    candidate_id: int
    metrics: dict[str, Any] | None = None
    variables: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    error: str | None = None
    infeasible: bool = False  # it can never run (out of memory)
    run: str | None = None  # the task's `run`

    @classmethod
    def failed(cls, task: Task, error: str, infeasible: bool = False) -> Outcome:
        return cls(task.candidate_id, error=error, infeasible=infeasible, run=task.run)


@dataclasses.dataclass(frozen=True)
class Failure:
    """A task's failure as plain data, sent back instead of its exception: one that pickle
    cannot rebuild would break the whole pool, and every candidate in it lose its cause."""

    error: str  # "TypeName: first line", as `worker.describe_failure` words it
    infeasible: bool = False


def outcome_of(task: Task, result: Any) -> Outcome:
    """The Outcome of what a worker sent back for `task` (a result or a `Failure`)."""
    if isinstance(result, Failure):
        return Outcome.failed(task, result.error, result.infeasible)
    metrics, variables = result
    return Outcome(task.candidate_id, metrics, variables, run=task.run)


class Executor(Protocol):
    """Where tasks train. At most `capacity` are `running()` at once; `poll` hands back each
    task's outcome exactly once; `close` stops what runs."""

    capacity: int

    def submit(self, task: Task) -> None: ...

    def running(self) -> int: ...

    def poll(self, timeout: float) -> list[Outcome]: ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------- the study


def candidate_dir(workdir: str, candidate_id: int) -> str:
    return os.path.join(os.path.abspath(workdir), "candidates", str(candidate_id))


def rung_plan(train: ml_collections.ConfigDict, search: SearchSettings) -> RungPlan:
    """The search's multi-fidelity rungs (children's budget: train.total_epochs)."""
    full = train.get("total_epochs", None)
    full = base_config().total_epochs if full is None else full
    return RungPlan.from_config(search.fidelity, float(full))


class StartingWeights:
    """The starting weights of the children this process proposed, saved to disk (for
    a resumed search and external workers) and kept in memory (`keep` at most) until
    their task is made here."""

    def __init__(self, keep: int) -> None:
        self.keep = max(1, keep)
        self._kept: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def save(self, path: str, variables: dict[str, Any]) -> str:
        """Writes `variables` to `path` and keeps a copy; the path."""
        path = save_variables(path, variables)
        self._kept[path] = _host_copy(variables)
        while len(self._kept) > self.keep:
            self._kept.popitem(last=False)
        return path

    def take(self, path: str) -> dict[str, Any] | None:
        """The weights saved at `path` by `save`, once; None when not kept here."""
        return self._kept.pop(os.path.abspath(path), None)


def _host_copy(tree: Any) -> Any:
    """`tree` as nested plain dicts of writable numpy arrays, as a read from disk gives."""
    if isinstance(tree, Mapping):
        return {str(k): _host_copy(v) for k, v in tree.items()}
    return np.array(tree)


def make_task(study: Study, train: ml_collections.ConfigDict, search: SearchSettings,
              candidate_id: int, functions: bytes | None = None,
              starts: StartingWeights | None = None) -> Task:
    """The task of a claimed candidate, to its current rung in its own training folder (the
    next rung resumes there); a child fits its new ops at its first rung only."""
    candidate = study.get(candidate_id)
    parent = None if candidate.parent_id is None else study.get(candidate.parent_id)
    train_config = candidate_train_config(train.to_dict(), search, is_seed=parent is None)
    train_config = hparams_lib.apply(train_config, candidate.inheritance.hparams,
                                     parent is None, search)
    directory = candidate_dir(str(study.workdir), candidate_id)
    saved = candidate.inheritance.init_path
    legacy = os.path.join(directory, "init")  # studies written before init_path existed
    variables = None
    if saved:  # complete before the candidate was added (see Driver.propose)
        kept = starts.take(saved) if starts is not None else None
        variables = kept if kept is not None else load_variables(saved)
    elif os.path.isdir(legacy):
        variables = load_variables(legacy)
    elif parent is not None:
        variables = load_variables(str(parent.checkpoint_path))
    first_rung = candidate.rung == 0
    return Task(
        candidate_id, train_config, candidate.graph_json, variables,
        time_limit_s=search.time_limit_s,
        workdir=os.path.join(directory, "train"),
        stop_epochs=rung_plan(train, search).stop_epochs(candidate),
        fit=fit_task(train, search, candidate, parent) if first_rung and parent else None,
        costs=dict(search.costs), functions=functions,
        latency=search.latency.task_settings(),
        # the seed trains on while its validation accuracy rises (search.seed_max_epochs)
        rounds=seed_rounds(train.to_dict(), search) if parent is None else None,
        min_start_accuracy=start_bound(search, parent) if first_rung else None,
        tensorboard=(tensorboard_runs.candidate_run(str(study.workdir), candidate_id)
                     if search.tensorboard else None))


def start_bound(search: SearchSettings, parent: Any) -> float | None:
    """The parent's validation accuracy less `search.max_start_drop` (None: off, or a
    seed). Why: a child that started far below its parent ended below it, every time."""
    drop = search.max_start_drop
    if not drop or parent is None or parent.accuracy is None:
        return None
    return float(parent.accuracy) - drop


def fit_task(train: ml_collections.ConfigDict, search: SearchSettings, candidate: Any,
             parent: Any) -> dict[str, Any] | None:
    """What `candidate`'s new ops are fitted with (None: nothing, or unreadable parent)."""
    pairs = candidate.inheritance.fit_pairs
    if not pairs:
        return None
    try:
        parent_variables = load_variables(str(parent.checkpoint_path), shared=True)
    except ValueError as e:  # damaged since the child was proposed: train it unfitted
        logging.warning("candidate %d: not fitted, its parent's weights cannot be read: %s",
                        candidate.id, str(e).splitlines()[0])
        return None
    return fit_lib.task(parent.graph_json, parent_variables, candidate.inheritance.new or (),
                        pairs, train.input, search.fit, search.seed)


def record_outcome(study: Study, outcome: Outcome, worker: str | None = None,
                   rungs: RungPlan | None = None) -> None:
    """Writes a finished candidate's weights and metrics, or its error, to the study.

    With `worker`, nothing is written unless that worker still holds the claim. With
    `rungs`, a child at a rung before its last is promoted or stopped there."""
    cid = outcome.candidate_id
    if worker is not None and not study.holds(cid, worker):
        logging.warning("candidate %d: %s no longer holds it; its outcome is dropped", cid,
                        worker)
        return
    if outcome.error is not None:
        if refused_at_start(outcome.error) and record_refusal(study, cid, outcome.error,
                                                             worker):
            return
        logging.warning("candidate %d failed: %s", cid, outcome.error)
        study.fail(cid, outcome.error, infeasible=outcome.infeasible, worker=worker)
        return
    rungs = rungs or RungPlan()
    candidate = study.get(cid)
    epochs = rungs.rung_epochs(candidate) if rungs.applies(candidate) else None
    if epochs is not None and not rungs.is_last(candidate.rung):
        record_rung(study, outcome, candidate.rung, epochs, rungs, worker)
        return
    path = save_variables(os.path.join(candidate_dir(str(study.workdir), cid), "final"),
                          outcome.variables or {})
    hparams = candidate.inheritance.hparams
    metrics = {**(outcome.metrics or {}), "hparams": hparams} if hparams else outcome.metrics
    try:
        study.tell(cid, metrics, checkpoint_path=path, worker=worker, rung_epochs=epochs)
    except ValueError as e:  # e.g. NaN metrics
        study.fail(cid, str(e), worker=worker)


# What a child refused at its start raised, as the first word of the one-line cause that
# every executor carries back.
REFUSED_AT_START = ("PoorStartError", "PoorFitError", "ConstantOutputError")


def refused_at_start(error: str) -> bool:
    """Whether a task's one-line error says its child could not start near its parent."""
    return error.split(":", 1)[0].strip() in REFUSED_AT_START


def record_refusal(study: Study, candidate_id: int, error: str, worker: str | None) -> bool:
    """Records a child refused at its start and deletes its files; False when it was not
    refused (its slot had `search.max_refusals`, or `worker` lost it)."""
    try:
        saved = study.get(candidate_id).inheritance.init_path
        refusal = study.refuse(candidate_id, error, worker=worker)
        if refusal is None:
            after = study.get(candidate_id)
            if after.status == Status.FAILED:  # its slot failed, with the cause
                logging.warning("candidate %d failed: %s", candidate_id, after.error)
            return after.status == Status.FAILED
    except ValueError:  # refused already (by the worker that held it before): gone
        return True
    logging.info("candidate %d refused at its start (%s; its slot's refusal %d): %s",
                 candidate_id, refusal.kind, refusal.slot_refusals, error)
    for path in (saved, candidate_dir(str(study.workdir), candidate_id)):
        if path:
            shutil.rmtree(path, ignore_errors=True)
    return True


def record_rung(study: Study, outcome: Outcome, rung: int, epochs: float, rungs: RungPlan,
                worker: str | None) -> None:
    """A child's result at a rung before its last: promoted (pending again, to resume) or
    stopped (its weights at this rung kept as its checkpoint)."""
    cid = outcome.candidate_id
    path = save_variables(os.path.join(candidate_dir(str(study.workdir), cid), f"rung{rung}"),
                          outcome.variables or {})
    metrics = dict(outcome.metrics or {}, epochs=epochs)
    try:
        after = study.record_rung(cid, rung, epochs, metrics, rungs.decide,
                                  checkpoint_path=path, worker=worker,
                                  cost=rungs.config.cost)
    except ValueError as e:  # e.g. NaN metrics
        study.fail(cid, str(e), worker=worker)
        return
    if after.checkpoint_path != path:  # promoted: its training checkpoint carries on
        shutil.rmtree(path, ignore_errors=True)
    logging.info("candidate %d at rung %d (%g epochs): %s", cid, rung, epochs,
                 after.rungs[-1]["reason"] if after.rungs else after.status)
