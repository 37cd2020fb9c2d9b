"""The evolution loop: seed, then select a parent, mutate, train, record; resumable.

Everything the loop decides derives from `search.seed` and a proposal counter stored in
the same transaction as the candidate it produced, so a driver killed at any moment and
started again with the same command goes on where it stopped. External workers may claim
candidates at any time; the driver waits for them instead of stopping.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np
from absl import logging
from tqdm.auto import tqdm

from nas import functions as fn_lib
from nas.graph.serialize import graph_to_json, load
from nas.mutation import MoveFailed, NoChildFound, fingerprint_at, propose_child
from nas.properties import op_cache
from nas.search.execution import tensorboard_runs, user_functions
from nas.search.execution.executors import make_executor
from nas.search.execution.finals import Finals, run_finals
from nas.search.execution.seeds import (
    check_seed,
    open_study,
    resumed_config,
    seed_list,
)
from nas.search.execution.task import (
    Executor,
    Outcome,
    StartingWeights,
    Task,
    make_task,
    record_outcome,
    rung_plan,
)
from nas.search.execution.worker import describe_failure
from nas.search.store.candidate import FINISHED, Inheritance, Status
from nas.search.store.finals import search_complete
from nas.search.store.study import (
    MAX_CANDIDATES,
    PROPOSALS,
    SEEDS,
    SEEDS_ADDED,
    STOPPED,
    DuplicateCandidateError,
    LeaseKeeper,
    Study,
    default_worker,
    seeding,
)
from nas.search.strategy import blocks as blocks_lib
from nas.search.strategy import hparams as hparams_lib
from nas.search.strategy import move_mix
from nas.search.strategy.population import DoneCache, Population
from nas.search.strategy.selection import Individual, Selector, select_parents
from nas.search.strategy.settings import (
    SearchSettings,
    candidate_train_config,
    decision_config,
    read_settings,
)
from nas.train import fit
from nas.train.checkpoint import load_variables, save_variables
from nas.train.config import image_shape
from nas.train.data import plain_batches
from nas.train.fit import ConstantOutputError
from nas.train.perf import count_params
from nas.train.preflight import labelled_schedule_notes


class ChildTooLargeError(Exception):
    """A proposed child has more parameters than the search allows."""


class StopSearch(Exception):
    """Raised by a callback of `Driver.run` (`nas.StopSearch`) to end the search after the
    candidate it was called with; the study stays resumable."""


class SearchFailed(ValueError):
    """The search could not train anything (e.g. its seed model fails): exit non-zero."""


# Study state: {candidate id: why its weights cannot be read}. Such a candidate is no
# longer chosen as a parent (its children could not inherit), and the search goes on.
UNUSABLE_PARENTS = "unusable_parents"

# Moves whose changed ops keep their names: each is fitted to its parent's output where
# that output keeps its shape (the layers after a narrowed group or a removed branch).
RESIZED_IN_PLACE = ("shrink", "prune", "drop_branch", "stride", "separable")
# Block edits: the ops after an added, deleted or redefined block keep their names and may
# start fresh at a new input width (CifarNet's fc/dense after a block added or deleted, its
# child at chance); those are fitted the same way, with the new block's ops.
BLOCK_EDITS = ("block_add", "block_delete", "block_mutate")

# Study state: whether the search said that its seed is below search.selection.min_acc.
SEED_BELOW_MIN_ACC = "seed_below_min_acc_said"

STOPPED_EARLY = ("search stopped early: nothing left to train and no child could be "
                 "proposed (%d failed proposals)")


def unusable_parents(study: Study) -> dict[int, str]:
    """The candidates marked unusable as parents, with the reason recorded for each."""
    return {int(k): str(v) for k, v in (study.get_state(UNUSABLE_PARENTS, {}) or {}).items()}


def init_path(workdir: str | Path, proposal: int | str) -> str:
    """Where a proposal's (or a named seed's) starting weights are saved before its
    candidate exists."""
    return os.path.join(os.path.abspath(workdir), "inits", str(proposal))


def remove_partial_saves(study: Study) -> list[str]:
    """Deletes what saves cut short by a kill left (*.orbax-checkpoint-tmp*), except in
    the folders of claimed candidates, where a live worker may be saving."""
    workdir = Path(study.workdir)
    running = {str(c.id) for c in study.candidates(Status.RUNNING)}
    leftovers = sorted((workdir / "inits").glob("*.orbax-checkpoint-tmp*"))
    if (workdir / "candidates").is_dir():
        for folder in sorted((workdir / "candidates").iterdir()):
            if folder.name not in running:
                leftovers += sorted(folder.rglob("*.orbax-checkpoint-tmp*"))
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    removed = [str(path) for path in leftovers]
    if removed:
        logging.info("removed %d partial save(s): %s", len(removed), removed)
    return removed


def schedule_lines(train: ml_collections.ConfigDict, search: SearchSettings) -> list[str]:
    """A line for each warmup or cooldown that the seed's or the children's run shortens."""
    plain = train.to_dict()
    return labelled_schedule_notes({
        "the seed": candidate_train_config(plain, search, is_seed=True),
        "each child": candidate_train_config(plain, search, is_seed=False)}, "train.")


class Driver:
    """One search over one study directory."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str,
                 functions: Mapping[str, Callable[..., Any]] | None = None,
                 settings: SearchSettings | None = None) -> None:
        """`functions`: the user's functions by value (those the config names but not
        given are imported). `settings`: `config`'s, where the caller read them already."""
        given = settings if settings is not None else read_settings(config)  # before disk
        self.workdir = os.path.abspath(workdir)
        # the seeds checked before a new study was written, for seed_population to add
        self.study, self._seeds = open_study(self.workdir, config,
                                             check_new=lambda new: check_seed(new, given))
        config = resumed_config(config, self.study)
        # the stored config's (its dataset was checked when the study was created)
        self.search = SearchSettings.from_stored(config)
        self.train = config.train
        for line in schedule_lines(self.train, self.search):  # shortened in every worker
            print(line, flush=True)
        self.functions = user_functions.search_functions(self.train, self.search, functions)
        user_functions.check_recorded(self.study.get_state(user_functions.STATE, None),
                                      self.functions, self.workdir)
        self._shipped = fn_lib.pack(self.functions) if self.functions else None
        self._callbacks: tuple[Callable[[Any], Any], ...] = ()
        self.rungs = rung_plan(self.train, self.search)
        self.selection = self.search.selection  # with latency_ms and the bounds
        self.fit = self.search.fit
        self.input_shape = (1, *image_shape(self.train))
        self.worker = default_worker("driver")
        if self.search.workers > self.search.pipeline_depth:
            logging.warning("search.workers=%d > search.pipeline_depth=%d: at most %d "
                            "candidate(s) train at once (a proposal reads every result "
                            "up to pipeline_depth candidates back)", self.search.workers,
                            self.search.pipeline_depth, self.search.pipeline_depth)
        op_cache.enable(self.search.property_cache)
        self._shown: dict[str, int] | None = None  # counts last drawn on the progress bar
        self._done = DoneCache(self.study)  # finished rows read once each (per proposal)
        # children proposed and not yet started: at most pipeline_depth wait at once
        self._starts = StartingWeights(self.search.pipeline_depth + 1)
        self._selector = Selector(self.selection)  # keeps the pool and its ties
        self._told_no_blocks = False  # "block-level mutation does not apply" logged once
        self._failures = 0  # failed proposals in a row: the loop stops at max_proposal_failures
        self._progress = True
        self._board = (tensorboard_runs.StudyRun(self.workdir, self.selection.costs)
                       if self.search.tensorboard else None)  # written, never read

    # ------------------------------------------------------------------ proposing
    def seed_population(self) -> None:
        """Adds the seeds to a new study, one transaction each, so a cut seeding goes on."""
        planned, added = seeding(self.study)
        parts, self._seeds = self._seeds, None  # those checked when the study was created
        if planned is not None and added >= planned:
            return
        if parts is None:  # a resumed study's (its seeding was cut short)
            parts = seed_list(self.train, self.search)
        if self.search.seed_graph and self.search.mutation.mutate_by_block and \
                not any(p.blocks for p in parts):
            logging.warning("search.mutation.mutate_by_block: the seed graph %s has no "
                            "blocks, so block-level mutation (block_add_prob, "
                            "block_delete_prob, block_mutate_prob) does not apply; its "
                            "children are subgraph mutations", self.search.seed_graph)
            self._told_no_blocks = True
        budget = self.search.max_candidates
        if len(parts) > budget and not added:  # said once, when the study is seeded
            print(f"{len(parts)} seeds, more than search.max_candidates={budget}: the first "
                  f"{budget} train now, the others once max_candidates is raised", flush=True)
        hparams = hparams_lib.seed_values(self.train, self.search)
        for index in range(added, len(parts)):
            part = parts[index]
            path = None
            if part.variables is not None:  # saved before the candidate exists, as for children
                path = init_path(self.workdir, "seed" if index == 0 else f"seed{index}")
                shutil.rmtree(path, ignore_errors=True)
                save_variables(path, part.variables)
            # search.hparams: the seed's values, its children's starting point
            inheritance = Inheritance(hparams=hparams or None, init_path=path)
            # the counts of seeds are kept only when there are several
            state: dict[str, Any] = {PROPOSALS: 0} if index == 0 else {}
            if len(parts) > 1:
                state.update({SEEDS: len(parts), SEEDS_ADDED: index + 1})
            try:
                self.study.add(
                    graph_to_json(part.graph, part.constants), generation=0,
                    seed=self.search.seed,
                    fingerprint=fingerprint_at(part.graph, part.constants, self.input_shape),
                    inheritance=inheritance, blocks=part.blocks, state=state)
            except DuplicateCandidateError:  # another driver started together added it first
                logging.info("seed %d is already in the study (added by another driver)",
                             index + 1)

    def choose_parent(self, done: Any, rng: np.random.Generator) -> int:
        """The parent of the next child (a subclass may choose otherwise)."""
        if isinstance(done, Population):  # the driver's own: its columns are kept
            return self._selector.select(done.columns, rng, num=1)[0]
        return select_parents([Individual.from_candidate(c) for c in done], self.selection,
                              rng, num=1)[0]

    def population(self) -> Population | None:
        """The done candidates the next proposal reads (ids up to `read_through`), or None
        while one of them has not finished: worker timing never changes a proposal."""
        return self._done.population(self.read_through())

    def read_through(self) -> int:
        """The newest id the next proposal reads (the seeds at least)."""
        seeds = int(self.study.get_state(SEEDS, 1) or 1)
        return max(seeds, self.study.last_id() + 1 - self.search.pipeline_depth)

    def propose(self) -> int | None:
        """Adds one mutated child of a selected parent; None if this proposal failed."""
        done = self.population()
        if not done:
            return None
        done = done.without(unusable_parents(self.study))
        k = int(self.study.get_state(PROPOSALS, 0))
        rng = np.random.default_rng([self.search.seed, k])
        try:
            parent_id = self.choose_parent(done, rng)
        except ValueError as e:  # e.g. nobody reaches min_acc
            below = self.seed_below_min_acc(done)
            if below is None:
                logging.warning("no parent can be selected: %s", e)
                self.study.set_state(PROPOSALS, k + 1)
                return None
            parent_id = below
        parent = self.study.get(parent_id)
        child_seed = int(rng.integers(2**31 - 1))
        graph, constants = load(parent.graph_json)
        variables = self.parent_variables(parent)
        if variables is None:  # just marked unusable: the same proposal from the others
            return self.propose()
        blocks, builder, args = self.parent_blocks(parent)
        child = None
        try:
            mutation = move_mix.for_proposal(self.study, self.search.mutation.to_dict(),
                                             self.read_through(), k,
                                             float(self.selection.noninferiority_pt))
            child = propose_child(graph, constants, variables, seed=child_seed,
                                  config=mutation, blocks=blocks, builder=builder)
            existing = self.study.find(child.fingerprint)
            if existing:
                raise DuplicateCandidateError(child.fingerprint, existing[0])
            self.check_size(child, done)
            # complete on disk before the candidate exists: whoever claims it reads them
            init = init_path(self.workdir, k)
            shutil.rmtree(init, ignore_errors=True)  # a save of this proposal interrupted
            fit_pairs = self.fit_pairs(child, graph)
            self.check_varies(child, (graph, constants, variables), fit_pairs)
            self._starts.save(init, child.variables)
            child_blocks = None
            if args is not None and child.blocks is not None:  # built by the zoo builder
                child_blocks = blocks_lib.blocks_record(args, child.blocks)
            # a child refused at its start gives its slot to this one
            slot = self.study.open_refusal(self.read_through())
            hparams = hparams_lib.perturb(parent.inheritance.hparams, self.train,
                                          self.search, self.search.seed, k)
            child_id = self.study.add(
                child.graph_json(), parent_id=parent.id,
                generation=parent.generation + 1, seed=child_seed,
                fingerprint=child.fingerprint, spec=child.spec_json(),
                properties=child.properties_json(), blocks=child_blocks,
                inheritance=Inheritance(
                    kind=child.kind, inherited=tuple(sorted(child.inherited)),
                    new=tuple(sorted(child.new)), init_path=init,
                    fit_pairs=tuple(fit_pairs) or None, hparams=hparams or None,
                    proposal=k, slot_refusals=slot.slot_refusals if slot else None),
                state={PROPOSALS: k + 1}, replaces=slot.id if slot else None)
        except (MoveFailed, ConstantOutputError) as e:  # refused: recorded, and counted
            stage = "move" if isinstance(e, MoveFailed) else "start"
            kind = e.kind if isinstance(e, MoveFailed) else getattr(child, "kind", None)
            cause = e.line if isinstance(e, MoveFailed) else f"{type(e).__name__}: {e}"
            logging.warning("proposal %d from parent %d refused: %s", k, parent.id, cause)
            self.study.record_refusal(stage=stage, cause=cause, kind=kind, proposal=k,
                                      parent_id=parent.id, state={PROPOSALS: k + 1})
            return None
        except (NoChildFound, DuplicateCandidateError, ChildTooLargeError) as e:
            logging.info("proposal %d from parent %d failed: %s", k, parent.id, e)
            self.study.set_state(PROPOSALS, k + 1)
            return None
        return child_id

    def seed_below_min_acc(self, done: Sequence[Any]) -> int | None:
        """The seed when none reaches `search.selection.min_acc` (said once), else None."""
        min_acc = self.selection.min_acc
        seed = next((c for c in done if c.parent_id is None), None)
        if min_acc is None or seed is None or any(c.accuracy >= min_acc for c in done):
            return None
        if not self.study.get_state(SEED_BELOW_MIN_ACC, False):
            line = (f"the seed's validation accuracy {seed.accuracy:.3f} is below "
                    f"search.selection.min_acc={min_acc:g}: its children are proposed from "
                    f"it until one reaches that bar; set search.selection.min_acc lower, "
                    f"or search.seed_max_epochs to train the seed on")
            print(line, flush=True)
            logging.warning("%s", line)
            self.study.set_state(SEED_BELOW_MIN_ACC, True)
        return int(seed.id)

    def parent_variables(self, parent: Any) -> dict[str, Any] | None:
        """The weights of `parent`, or None when they cannot be read: it is then marked
        unusable as a parent and the search goes on. The seed's are needed: SearchFailed."""
        try:
            return load_variables(parent.checkpoint_path, shared=True)
        except ValueError as e:
            reason = str(e).splitlines()[0]
            if parent.parent_id is None:
                raise SearchFailed(f"the seed (candidate {parent.id}) cannot be a parent: "
                                   f"{reason}") from None
            marked = {str(k): v for k, v in unusable_parents(self.study).items()}
            self.study.set_state(UNUSABLE_PARENTS, {**marked, str(parent.id): reason})
            logging.warning("candidate %d is no longer used as a parent: %s", parent.id,
                            reason)
            return None

    def check_seed_weights(self) -> None:
        """Reads the finished seed's weights before the search writes anything."""
        seed = next((c for c in self.study.candidates(Status.DONE) if c.parent_id is None), None)
        if seed is not None and seed.checkpoint_path:
            self.parent_variables(seed)

    def check_size(self, child: Any, done: Any) -> None:
        """Refuses a child over `search.max_params_ratio` times the seed's parameters. Why:
        synthesis may widen a layer 15x, and such a child costs minutes to train and stays
        far off the front."""
        ratio = self.search.max_params_ratio
        seed = next((c for c in done if c.parent_id is None and c.params), None)
        if not ratio or seed is None:
            return
        count = count_params(child.variables["params"])
        if count > ratio * seed.params:
            raise ChildTooLargeError(
                f"the child has {count:,} parameters, more than search.max_params_ratio="
                f"{ratio:g} times the seed's {int(seed.params):,}")

    def parent_blocks(self, parent: Any) -> tuple[list[Any] | None, Any, dict[str, Any] | None]:
        """(blocks, builder, builder args) to mutate `parent` by block, or three Nones."""
        if not self.search.mutation.mutate_by_block:
            return None, None, None
        if parent.blocks is None:
            if not self._told_no_blocks:
                logging.info("search.mutation.mutate_by_block: candidate %d has no blocks (a "
                             "seed graph from a file, a whole-graph or reversible mutation), "
                             "so its children are subgraph mutations", parent.id)
                self._told_no_blocks = True
            return None, None, None
        blocks, builder, args = blocks_lib.read_blocks(parent.blocks, f"candidate {parent.id}")
        if not blocks_lib.rebuilds(builder, blocks, parent.graph_json):
            logging.warning("candidate %d: its stored blocks no longer rebuild its graph (the "
                            "zoo changed?); its children are subgraph mutations", parent.id)
            return None, None, None
        return blocks, builder, args

    def fit_pairs(self, child: Any, parent: Any) -> list[tuple[str, str]]:
        """(child tensor, parent tensor) pairs to fit the new ops on; `parent`: a graph."""
        if not self.fit.steps or not child.new or child.function_preserving:
            return []
        if child.kind in RESIZED_IN_PLACE or child.kind in BLOCK_EDITS:
            theirs = {op.name for op in parent.ops}
            return fit.resized_in_place(n for n in (child.fit_to or child.new) if n in theirs)
        return fit.replaced_tensors(child.spec) if child.kind == "subgraph" else []

    def check_varies(self, child: Any, parent: tuple[Any, Any, Any],
                     pairs: list[tuple[str, str]]) -> None:
        """Raises `ConstantOutputError` when the new outputs cannot depend on the image."""
        if not pairs:
            return
        train_input = decision_config(self.train, self.search).input  # no validation
        images = plain_batches(train_input, self.fit.batches, self.fit.images_per_batch,
                               self.search.seed)
        try:
            fit.check_varies(parent, (child.graph, child.constants, child.variables), pairs,
                             images[0])
        except (ValueError, KeyError) as e:  # e.g. a replaced tensor the child lacks
            logging.info("constant-output check skipped: %s", e)

    # ------------------------------------------------------------------ training
    def task(self, candidate_id: int) -> Task:
        return make_task(self.study, self.train, self.search, candidate_id, self._shipped,
                         self._starts)

    def startable(self, candidate_id: int) -> Task | None:
        """The task of a claimed candidate, or None when it cannot start (recorded failed)."""
        try:
            return self.task(candidate_id)
        except ValueError as e:
            self.record(Outcome(candidate_id, error=describe_failure(e)[0]))
            return None

    def record(self, outcome: Outcome) -> None:
        record_outcome(self.study, outcome, worker=self.worker, rungs=self.rungs)

    # ------------------------------------------------------------------ loop
    def finished(self) -> bool:
        """Whether the study has `max_candidates` finished candidates and its finals ran."""
        return search_complete(self.study, self.search.max_candidates, self.search.finals)

    def run(self, progress: bool = True,
            callbacks: Sequence[Callable[[Any], Any]] = ()) -> Study:
        """Runs to `max_candidates` finished candidates; SearchFailed when nothing trained.
        Each of `callbacks` is called with each candidate that finishes; one that raises
        `StopSearch` ends the run there, as Ctrl-C does (the claims are given back)."""
        search = self.search
        self._callbacks = tuple(callbacks)
        self._progress = progress
        self.check_seed_weights()  # before the first write: a failed command changes nothing
        remove_partial_saves(self.study)
        self.study.set_state(user_functions.STATE, fn_lib.describe(self.functions))
        self.study.set_state(MAX_CANDIDATES, search.max_candidates)
        self.study.set_state(STOPPED, False)
        self.seed_population()
        executor = make_executor(
            search.executor, workers=search.workers, ray_address=search.ray_address,
            hard_timeout_s=search.hard_time_limit_s, prepare_ahead=self.prepare_ahead,
            share_device=self.workdir, ray=search.ray, max_tries=search.max_attempts)
        keeper = LeaseKeeper(self.workdir, self.worker, search.lease_s)
        bar = tqdm(total=search.max_candidates, disable=not progress, unit="cand")
        inflight: set[int] = set()
        try:
            self._loop(executor, keeper, inflight, bar)
            bar.close()
            self.run_finals(executor)
            self.study.set_state(STOPPED, True)
        except StopSearch as e:
            logging.info("the search was stopped by a callback: %s", e)
        finally:
            try:
                executor.close()
            finally:
                keeper.close()
                self.release_claims(inflight)  # interrupted: hand the claims back at once
                bar.close()
                if self._board is not None:
                    self._board.close()
        self._done.refresh()
        if not self._done.any_done():
            errors = [f"candidate {c.id}: {c.error}" for c in self.study.candidates()
                      if c.error][:1]
            raise SearchFailed("the search trained nothing"
                               + (f" ({errors[0]})" if errors else ""))
        return self.study

    def run_finals(self, executor: Executor) -> None:
        """Trains what the finals need on the search's executor (inline, without one)."""
        if not self._done.any_done():
            return
        if executor.capacity == 0:
            executor = make_executor("inline", workers=1, ray_address=None,
                                     hard_timeout_s=0.0)
        run_finals(Finals(self.study, self.train, self.search, self._shipped), executor,
                   self._progress)

    def release_claims(self, inflight: set[int]) -> None:
        """Gives back every claim this driver holds, those the loop never saw included."""
        mine = {c.id for c in self.study.candidates(Status.RUNNING, with_graphs=False)
                if c.worker == self.worker}
        for cid in sorted(mine | inflight):
            self.study.release(cid, self.worker)

    @property
    def prepare_ahead(self) -> int:
        """Processes per device beyond the training one, as far as the pipeline allows."""
        workers = max(1, self.search.workers)
        room = -(-(self.search.pipeline_depth - workers) // workers)  # ceiling
        return min(self.search.prepare_ahead, max(0, room))

    def _loop(self, executor: Executor, keeper: LeaseKeeper, inflight: set[int], bar: tqdm) -> None:
        # reads self.search on every pass: a caller may replace the settings while it runs
        # (a benchmark's wall-clock budget lowers max_candidates)
        self._failures = 0
        while True:
            counts = self.study.counts()
            finished = self.study.finished_count(counts)
            self._update(bar, finished, counts)
            if finished >= self.search.max_candidates:
                return
            if executor.capacity == 0:  # external workers train: keep one child pending
                pending, running = counts[Status.PENDING], counts[Status.RUNNING]
                if not pending and sum(counts.values()) < self.search.max_candidates and \
                        counts[Status.DONE] and self._may_propose() and \
                        self.population() is not None:
                    self._propose_counted()
                    continue
                if not pending and not running:
                    logging.warning(STOPPED_EARLY, self._failures)
                    return
                self._wait_for_workers()
                continue
            while executor.running() < executor.capacity:
                # this run's lease, which the keeper renews, not the one stored at creation
                candidate = self.study.claim(worker=self.worker, lease_s=self.search.lease_s)
                if candidate is not None:
                    inflight.add(candidate.id)  # before its task is built: Ctrl-C frees it
                    task = self.startable(candidate.id)
                    if task is None:  # recorded as failed
                        inflight.discard(candidate.id)
                    else:
                        keeper.hold(candidate.id)
                        executor.submit(task)
                    continue
                total = sum(self.study.counts().values())
                self._done.refresh()
                if total >= self.search.max_candidates or not self._done.any_done():
                    break
                if self.population() is None:  # wait for the results it must read
                    break
                if not self._propose_counted() and not self._may_propose():
                    break
            if self._may_propose():
                self.propose_ahead(executor)
            if executor.running() == 0:
                if self.study.counts()[Status.RUNNING]:  # external workers are training
                    self._wait_for_workers()
                    continue
                if self.study.counts()[Status.PENDING]:
                    continue  # e.g. a claim released by a worker
                logging.warning(STOPPED_EARLY, self._failures)
                return
            for outcome in executor.poll(timeout=1.0):
                keeper.drop(outcome.candidate_id)
                inflight.discard(outcome.candidate_id)
                self.record(outcome)
                self.tell_callbacks(outcome.candidate_id)

    def _propose_counted(self) -> bool:
        """`propose`, counting the failed proposals in a row (`_failures`)."""
        added = self.propose() is not None
        self._failures = 0 if added else self._failures + 1
        return added

    def _may_propose(self) -> bool:
        return self._failures < self.search.max_proposal_failures

    def _wait_for_workers(self) -> None:
        time.sleep(min(1.0, self.search.lease_s / 4))

    def tell_callbacks(self, candidate_id: int) -> None:
        """Calls each callback with the candidate, if it finished."""
        if not self._callbacks:
            return
        try:
            candidate = self.study.get(candidate_id)
        except ValueError:  # refused at its start: no longer a candidate
            return
        if candidate.status in FINISHED:
            for callback in self._callbacks:
                callback(candidate)

    def propose_ahead(self, executor: Executor) -> bool:
        """While every worker trains, proposes one child if fewer than
        `search.propose_ahead` are pending and its results are in, so a worker that
        finishes claims one at once (counted in `_failures`): whether one was added."""
        if executor.running() < executor.capacity:
            return False
        counts = self.study.counts()
        if (counts["pending"] >= self.search.propose_ahead
                or sum(counts.values()) >= self.search.max_candidates
                or self.population() is None):
            return False
        return self._propose_counted()

    def _update(self, bar: tqdm, finished: int, counts: dict[str, int]) -> None:
        rungs = self.study.rung_counts() if self.rungs.epochs else {}
        shown = {**counts, **{f"rung{r}": n for r, (_, n) in rungs.items()}}
        if self._shown == shown:
            return
        self._shown = shown
        bar.n = finished
        self._done.refresh()
        if self._board is not None:
            self._board.update(self.study, finished, counts, self._done)
        best = self._done.best()
        extra = {}
        if self.rungs.epochs:  # results per rung, e.g. "0.25ep:6 1ep:3", and stopped ones
            extra = {"rungs": rung_text(self.rungs.epochs, rungs),
                     "stopped": counts.get(Status.STOPPED, 0)}
        bar.set_postfix(done=counts.get(Status.DONE, 0), failed=counts.get(Status.FAILED, 0),
                        **extra,
                        best_acc=f"{best.accuracy:.3f}" if best else "-",
                        front=self._done.front_size("flops") if best else 0)
        bar.refresh()


def rung_text(epochs: tuple[float, ...], counts: dict[int, tuple[float, int]]) -> str:
    """How many results each rung has, e.g. "0.25ep:6 1ep:3"."""
    return " ".join(f"{e:g}ep:{counts.get(i, (e, 0))[1]}" for i, e in enumerate(epochs))
