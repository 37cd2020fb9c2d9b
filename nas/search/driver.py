"""The evolution loop: seed, then select a parent, mutate, train, record; resumable.

Everything the loop decides is derived from `search.seed` and a proposal counter stored in
the study in the same transaction as the candidate it produced, and every result is recorded
in the study before the next step. So a driver killed at any moment and started again with
the same command continues: finished candidates are kept, candidates that were training are
re-queued (and resume from their own checkpoints), nothing finished is trained again.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import ml_collections
import numpy as np
from absl import logging
from tqdm import tqdm

from nas import zoo
from nas.graph.serialize import graph_to_json, load
from nas.search.executors import Outcome, make_executor
from nas.search.selection import Individual, SelectionConfig, select_parents
from nas.search.settings import validate_search
from nas.search.study import DuplicateCandidateError, Study
from nas.train.checkpoint import load_variables, save_variables


def candidate_dir(workdir: str, candidate_id: int) -> str:
    return os.path.join(os.path.abspath(workdir), "candidates", str(candidate_id))


def fingerprint_of(graph: Any, constants: Any, input_shape: tuple[int, ...]) -> str:
    """Stable across processes; symbolic widths are resolved so equal networks match."""
    from nas.properties import fingerprint

    return fingerprint.fingerprint_graph(graph, constants, {graph.input_names[0]: input_shape})


def describe_properties(properties: list[Any]) -> list[dict[str, Any]]:
    """A JSON-friendly record of the mutated properties a child was synthesized to meet."""
    out = []
    for prop in properties:
        entry: dict[str, Any] = {"type": type(prop).__name__}
        for name in ("depth_map", "input_shapes", "output_shapes", "pairings"):
            value = getattr(prop, name, None)
            if value is not None:
                entry[name] = json.loads(json.dumps(value, default=repr))
        out.append(entry)
    return out


# Fields of the search section a resumed search takes from the command line rather than
# from the stored config: how far and where to run, not what to search.
OPERATIONAL = ("max_candidates", "executor", "workers", "ray_address", "time_limit_s",
               "hard_time_limit_s")


def candidate_task(study: Study, train: ml_collections.ConfigDict,
                   search: ml_collections.ConfigDict, candidate_id: int) -> dict[str, Any]:
    """Plain-data arguments of `train_candidate` for a claimed candidate.

    Children start from inherited weights, so they fine-tune: they may train for fewer
    epochs than a seed model trained from scratch (`seed_epochs`) and at a lower rate."""
    candidate = study.get(candidate_id)
    train_config = train.to_dict()
    if candidate.parent_id is None and search.seed_epochs > 0:
        train_config["total_epochs"] = float(search.seed_epochs)
    if candidate.parent_id is not None and search.child_lr > 0:
        train_config["lr"] = float(search.child_lr)
    directory = candidate_dir(str(study.workdir), candidate_id)
    init = os.path.join(directory, "init")
    variables = None
    if os.path.isdir(init):
        variables = load_variables(init)
    elif candidate.parent_id is not None:  # killed before its init was saved: inherit again
        variables = load_variables(study.get(candidate.parent_id).checkpoint_path)
    return {
        "train_config": train_config,
        "graph_json": candidate.graph_json,
        "init_variables": variables,
        "time_limit_s": float(search.time_limit_s),
        "workdir": os.path.join(directory, "train"),
    }


def record_outcome(study: Study, outcome: Outcome) -> None:
    """Writes a finished candidate's weights and metrics, or its error, to the study."""
    if outcome.error is not None:
        logging.warning("candidate %d failed: %s", outcome.candidate_id, outcome.error)
        study.fail(outcome.candidate_id, outcome.error)
        return
    path = save_variables(
        os.path.join(candidate_dir(str(study.workdir), outcome.candidate_id), "final"),
        outcome.variables)
    try:
        study.tell(outcome.candidate_id, outcome.metrics, checkpoint_path=path)
    except ValueError as e:  # e.g. NaN metrics
        study.fail(outcome.candidate_id, str(e))


def resumed_config(given: ml_collections.ConfigDict, study: Study) -> ml_collections.ConfigDict:
    """The stored config of a resumed study, with the given operational search fields."""
    if not study.config:
        return given
    config = ml_collections.ConfigDict(study.config)
    for key in OPERATIONAL:
        if key in given.get("search", {}):
            config.search[key] = given.search[key]
    return config


def train_from_study(workdir: str, candidate_id: int | None = None,
                     worker: str | None = None) -> Any:
    """Claims one candidate (the next pending, or `candidate_id`), trains it in this process
    and records the result. For external workers (`nas-train --study`). None if none."""
    from nas.search.executors import InlineExecutor

    study = Study.load(workdir)
    config = ml_collections.ConfigDict(study.config)
    search = validate_search(config)
    candidate = study.claim(worker=worker, candidate_id=candidate_id)
    if candidate is None:
        return None
    executor = InlineExecutor()
    executor.submit(candidate.id, candidate_task(study, config.train, search, candidate.id))
    for outcome in executor.poll(0):
        record_outcome(study, outcome)
    return study.get(candidate.id)


class Driver:
    """One search over one study directory."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str) -> None:
        validate_search(config)
        self.workdir = os.path.abspath(workdir)
        self.study = Study.open(self.workdir, config=config.to_dict())
        config = resumed_config(config, self.study)
        self.search = validate_search(config)
        self.train = config.train
        self.selection = SelectionConfig.from_dict(dict(self.search.selection))
        size = int(self.train.input.image_size)
        self.input_shape = (1, size, size, 3)
        self.worker = f"driver@{socket.gethostname()}:{os.getpid()}"
        self._shown: dict[str, int] | None = None  # counts last drawn on the progress bar
        self._fit_images: list[Any] | None = None  # training batches new ops are fitted on

    # ------------------------------------------------------------------ proposing
    def seed_population(self) -> None:
        if self.study.candidates():
            return
        variables = None
        if self.search.seed_graph:  # the user's graph (and its weights, from an export)
            from nas.search.seed import read_seed_graph

            graph, constants, variables = read_seed_graph(self.search.seed_graph)
        else:
            graph, constants, _ = zoo.build(self.train.model_name,
                                            int(self.train.num_classes),
                                            int(self.train.input.image_size))
        seed_id = self.study.add(
            graph_to_json(graph, constants), generation=0, seed=self.search.seed,
            fingerprint=fingerprint_of(graph, constants, self.input_shape),
            state={"proposals": 0})
        if variables is not None:
            save_variables(os.path.join(candidate_dir(self.workdir, seed_id), "init"),
                           variables)

    def choose_parent(self, done: list[Any], rng: np.random.Generator) -> int:
        """The parent of the next child: selection from the Pareto fronts (a subclass may
        choose otherwise, e.g. a random-search baseline that always mutates the seed)."""
        return select_parents([Individual.from_candidate(c) for c in done], self.selection,
                              rng, num=1)[0]

    def propose(self) -> int | None:
        """Adds one mutated child of a selected parent; None if this proposal failed."""
        from nas.mutation import NoChildFound, propose_child

        done = self.study.candidates(status="done")
        if not done:
            return None
        k = int(self.study.get_state("proposals", 0))
        rng = np.random.default_rng([self.search.seed, k])
        try:
            parent_id = self.choose_parent(done, rng)
        except ValueError as e:  # e.g. nobody reaches min_acc
            logging.warning("no parent can be selected: %s", e)
            self.study.set_state("proposals", k + 1)
            return None
        parent = self.study.get(parent_id)
        child_seed = int(rng.integers(2**31 - 1))
        graph, constants = load(parent.graph_json)
        variables = load_variables(parent.checkpoint_path)
        mutation = dict(self.search.mutation)
        mutation.setdefault("input_shape", self.input_shape)
        try:
            child = propose_child(graph, constants, variables, seed=child_seed, config=mutation)
            init, fitted = self.fit_child(child, (graph, constants, variables), child_seed)
            child_id = self.study.add(
                graph_to_json(child.graph, child.constants), parent_id=parent.id,
                generation=parent.generation + 1, seed=child_seed,
                fingerprint=fingerprint_of(child.graph, child.constants, self.input_shape),
                spec=child.spec_json(), properties=describe_properties(child.properties),
                inheritance={"inherited": sorted(child.inherited), "new": sorted(child.new),
                             **({"fit": fitted} if fitted else {})},
                state={"proposals": k + 1})
        except (NoChildFound, DuplicateCandidateError) as e:
            logging.info("proposal %d from parent %d failed: %s", k, parent.id, e)
            self.study.set_state("proposals", k + 1)
            return None
        save_variables(os.path.join(candidate_dir(self.workdir, child_id), "init"), init)
        return child_id

    def fit_child(self, child: Any, parent: tuple[Any, Any, Any], seed: int
                  ) -> tuple[dict[str, Any], dict[str, float]]:
        """The child's variables with its new ops fitted to what they replace (see
        `nas.search.fit`), and the fit's errors; unchanged where fitting does not apply."""
        from nas.search import fit

        cfg = fit.FitConfig.from_dict(dict(self.search.fit))
        if (not cfg.steps or not child.new or child.kind != "subgraph"
                or child.function_preserving):
            return child.variables, {}
        if self._fit_images is None:  # the same batches for every child of this search
            self._fit_images = fit.training_batches(self.train, cfg.batches, cfg.batch_size,
                                                    int(self.search.seed))
        try:
            return fit.fit_new_ops(parent, (child.graph, child.constants, child.variables),
                                   child.new, fit.replaced_tensors(child.spec),
                                   self._fit_images, cfg)
        except (ValueError, KeyError) as e:  # e.g. a replaced tensor the child no longer has
            logging.info("child of seed %d not fitted: %s", seed, e)
            return child.variables, {}

    # ------------------------------------------------------------------ training
    def task(self, candidate_id: int) -> dict[str, Any]:
        return candidate_task(self.study, self.train, self.search, candidate_id)

    def record(self, outcome: Outcome) -> None:
        record_outcome(self.study, outcome)

    # ------------------------------------------------------------------ loop
    def run(self, progress: bool = True) -> Study:
        search = self.search
        requeued, failed = self.study.requeue_running(int(search.max_attempts))
        if requeued or failed:
            logging.info("resuming: re-queued %s, failed after too many attempts %s",
                         requeued, failed)
        self.seed_population()
        executor = make_executor(
            search.executor, workers=int(search.workers), ray_address=search.ray_address,
            hard_timeout_s=float(search.hard_time_limit_s),
            num_cpus=float(search.num_cpus_per_candidate),
            num_gpus=float(search.num_gpus_per_candidate))
        bar = tqdm(total=int(search.max_candidates), disable=not progress, unit="cand")
        proposal_failures = 0
        try:
            while True:
                counts = self.study.counts()
                finished = counts.get("done", 0) + counts.get("failed", 0) + counts.get(
                    "infeasible", 0)
                self._update(bar, finished, counts)
                if finished >= search.max_candidates:
                    break
                while executor.running() < executor.capacity:
                    candidate = self.study.claim(worker=self.worker)
                    if candidate is not None:
                        executor.submit(candidate.id, self.task(candidate.id))
                        continue
                    total = sum(self.study.counts().values())
                    if total >= search.max_candidates or not self.study.candidates("done"):
                        break
                    if self.propose() is None:
                        proposal_failures += 1
                        if proposal_failures >= search.max_proposal_failures:
                            break
                    else:
                        proposal_failures = 0
                if executor.running() == 0:
                    logging.warning("search stopped early: nothing left to train and no "
                                    "child could be proposed (%d failed proposals)",
                                    proposal_failures)
                    break
                for outcome in executor.poll(timeout=1.0):
                    self.record(outcome)
        finally:
            executor.close()
            bar.close()
        return self.study

    def _update(self, bar: tqdm, finished: int, counts: dict[str, int]) -> None:
        if self._shown == counts:
            return
        self._shown = dict(counts)
        bar.n = finished
        best = self.study.best(1)
        bar.set_postfix(done=counts.get("done", 0), failed=counts.get("failed", 0),
                        best_acc=f"{best[0].accuracy:.3f}" if best else "-",
                        front=len(self.study.pareto_front("flops")) if best else 0)
        bar.refresh()


def run_search(config: ml_collections.ConfigDict, workdir: str, progress: bool = True) -> Study:
    return Driver(config, workdir).run(progress=progress)
