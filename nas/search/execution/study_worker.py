"""An external study worker (`nas-search worker`): claims candidates and trains them here.

A worker may start before the driver (it waits for the study), survives a driver restart
(its claims are leases it renews) and may die at any moment (its lease expires and someone
else trains the candidate).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_collections
from absl import logging

from nas.search.execution.task import Outcome, make_task, record_outcome, rung_plan
from nas.search.execution.user_functions import STATE, check_recorded, search_functions
from nas.search.execution.worker import ClaimLost, describe_failure, train_candidate
from nas.search.store.study import (
    DB_NAME,
    STOPPED,
    Candidate,
    LeaseKeeper,
    Study,
    StudyNotFoundError,
    default_worker,
)
from nas.search.strategy.settings import SearchSettings


def wait_for_study(workdir: str | Path, wait_s: float,
                   say: Callable[[str], None] | None = None) -> Study:
    """The study in `workdir`, waiting up to `wait_s` for a driver to create it (`say`,
    else the log, is told so once). A file there that is not a study is a ValueError at
    once: no driver will turn it into one."""
    deadline = time.monotonic() + wait_s
    path = Path(workdir) / DB_NAME
    told = False
    while True:
        if path.is_file() and path.stat().st_size > 0:
            try:
                study = Study.load(workdir)
                if study.config:  # created and committed
                    return study
                study.close()
            except StudyNotFoundError:  # an empty file: a creation not yet committed
                if time.monotonic() > deadline:
                    raise
            except ValueError as e:  # damaged or foreign: waiting cannot help
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
        if not told and wait_s > 0:
            (say or logging.info)(f"waiting up to {wait_s:g} s for a study to appear in "
                                  f"{path} (start the driver with --workdir={workdir})")
            told = True
        if time.monotonic() > deadline:
            raise ValueError(f"{path}: no study appeared within {wait_s:g} s (start the "
                             f"driver with --workdir={workdir})")
        time.sleep(0.5)


def search_finished(study: Study) -> bool:
    """The driver stopped, or as many candidates finished as the driver asked for."""
    if study.get_state(STOPPED, False):
        return True
    return study.finished_count() >= study.max_candidates


def train_claimed(study: Study, config: ml_collections.ConfigDict,
                  search: SearchSettings, candidate: Candidate, worker: str) -> None:
    """Train a claimed candidate here, renewing its lease, and record the outcome (nothing
    if the lease was lost). Ctrl-C gives the claim back. With `search.prepare_ahead` > 0
    it takes turns on this device with the search's other processes on this host."""
    with LeaseKeeper(study.workdir, worker, search.lease_s) as keeper:
        keeper.hold(candidate.id)
        try:
            task = make_task(study, config.train, search, candidate.id)
            share = str(study.workdir) if search.prepare_ahead else None
            metrics, variables = train_candidate(
                task, should_stop=lambda: keeper.lost(candidate.id), share_device=share)
            outcome = Outcome(candidate.id, metrics, variables)
        except KeyboardInterrupt:
            study.release(candidate.id, worker)
            raise
        except ClaimLost:
            logging.warning("candidate %d: lease lost; result dropped", candidate.id)
            return
        except (Exception, MemoryError) as e:  # noqa: BLE001 - recorded as the outcome
            message, infeasible = describe_failure(e)
            outcome = Outcome(candidate.id, error=message, infeasible=infeasible)
        keeper.drop(candidate.id)
        record_outcome(study, outcome, worker=worker, rungs=rung_plan(config.train, search))


def run_worker(workdir: str | Path, candidate_id: int | None = None, *, wait_s: float = 600.0,
               worker: str | None = None, say: Callable[[str], None] | None = None
               ) -> list[Candidate]:
    """Claim and train candidates of the study in `workdir` until the search is finished
    (or nothing was claimable for `wait_s`); with `candidate_id`, just that one. Returns
    the candidates this worker trained, as recorded."""
    study = wait_for_study(workdir, wait_s, say=say)
    config = ml_collections.ConfigDict(study.config)
    search = SearchSettings.from_stored(study.config)
    # by name: one the driver shipped by value (from a notebook) is one line here, at start
    check_recorded(study.get_state(STATE, None), search_functions(config.train, search),
                   str(study.workdir))
    worker = worker or default_worker("worker")
    trained: list[Any] = []
    idle_since = time.monotonic()
    while True:
        candidate = study.claim(worker=worker, candidate_id=candidate_id)
        if candidate is None:
            if candidate_id is not None:
                status = study.get(candidate_id).status
                raise ValueError(f"--candidate={candidate_id}: candidate {candidate_id} is "
                                 f"{status}, not pending")
            if search_finished(study) or time.monotonic() - idle_since > wait_s:
                return trained
            time.sleep(1.0)
            continue
        logging.info("%s: training candidate %d", worker, candidate.id)
        train_claimed(study, config, search, candidate, worker)
        if study.has_candidate(candidate.id):  # else refused at its start: no longer a candidate
            trained.append(study.get(candidate.id))
        idle_since = time.monotonic()
        if candidate_id is not None:
            return trained
