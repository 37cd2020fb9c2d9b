"""`Study.enqueue`: an architecture of the user's, trained next, before any proposal.

Why: a user often knows a model worth trying (a colleague's, a paper's, last month's
best); enqueued on a study that has its seeds (one that ran once, finished or not), before
the search resumes or while it runs, it is trained as a seed is (it has no parent:
its own weights when given, else from scratch), comes before any proposed child in the
claim order (`Study.claim`), and is a parent for proposals like every other result. It
counts toward `search.max_candidates`: a finished search trains it once that is raised.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from nas.search.store.study_writes import StudyWrites

# Study state of a study with several seeds: how many it starts from, and how many of
# them are in it (a study without them has one seed, in once it has a candidate).
SEEDS = "seeds"
SEEDS_ADDED = "seeds_added"


def seeding(study: Any) -> tuple[int | None, int]:
    """(seeds planned, seeds added) of `study`: (None, 0) before its first seed."""
    if not study.last_id():
        return None, 0
    planned = study.get_state(SEEDS, None)
    if planned is None:  # one seed, or a study written before there could be several
        return 1, 1
    return int(planned), int(study.get_state(SEEDS_ADDED, 0))


class StudyEnqueue(StudyWrites):
    """`Study.enqueue`."""

    def enqueue(self, architecture: Any, constants: dict[str, Any] | None = None, *,
                variables: dict[str, Any] | None = None) -> int:
        """Adds `architecture` as a pending candidate trained before any proposed child;
        returns its id. The search trains it when it next runs (`nas.run_search` or
        `nas-search` on this workdir), within `search.max_candidates`.

        architecture: what `nas.load_candidate` or `nas.from_flax` returns (with its
          weights, if it has them), the path of an exported candidate or graph JSON, or a
          `nas.graph.Graph` with its `constants`. variables: weights for a graph (or in
          place of a candidate's own); None trains it from scratch.

        Each mistake (a study without its seeds yet, other outputs or input shape than the
        study's, weights that do not fit, an architecture already in the study) is one
        ValueError line, and nothing is written."""
        import ml_collections

        from nas.graph.serialize import graph_to_json
        from nas.mutation import fingerprint_at
        from nas.search.store.study_writes import DuplicateCandidateError
        from nas.search.strategy import hparams as hparams_lib
        from nas.search.strategy.settings import SearchSettings
        from nas.train import preflight
        from nas.train.checkpoint import save_variables
        from nas.train.config import image_shape, with_defaults

        config = self.config or {}
        if "train" not in config or "search" not in config:
            raise ValueError(f"enqueue: {self.path} is not a search's study (its config has "
                             f"no train and search sections)")
        planned, added = seeding(self)
        if planned is None or added < planned:
            raise ValueError(f"enqueue: the study in {self.workdir} has no seed yet (expected "
                             f"a search that ran once; a model to start from is its seed)")
        graph, constants, variables = architecture_parts(architecture, constants, variables)
        train = with_defaults(ml_collections.ConfigDict(config["train"]))
        search = SearchSettings.from_stored(config)
        preflight.check_outputs(graph, constants, train, "enqueue: the architecture")
        shape = image_shape(train)
        if variables is not None:
            check_weights(graph, constants, variables, shape)
        fingerprint = fingerprint_at(graph, constants, (1, *shape))
        existing = self.find(fingerprint)
        if existing:
            raise ValueError(f"enqueue: the architecture is already candidate {existing[0]} "
                             f"of {self.workdir}")
        inheritance: dict[str, Any] = {"enqueued": True}
        hparams = hparams_lib.seed_values(train, search)
        if hparams:
            inheritance["hparams"] = hparams
        path = None
        if variables is not None:  # complete on disk before the candidate exists
            path = os.path.join(os.path.abspath(self.workdir), "inits",
                                f"enqueued-{fingerprint[:16]}")
            shutil.rmtree(path, ignore_errors=True)
            save_variables(path, variables)
            inheritance["init_path"] = path
        try:
            return self.add(graph_to_json(graph, constants), generation=0,
                            seed=search.seed, fingerprint=fingerprint,
                            inheritance=inheritance)
        except DuplicateCandidateError as e:  # added meanwhile by another process
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
            raise ValueError(f"enqueue: the architecture is already candidate "
                             f"{e.existing_id} of {self.workdir}") from None


def architecture_parts(architecture: Any, constants: dict[str, Any] | None,
                       variables: dict[str, Any] | None
                       ) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables) of what `StudyEnqueue.enqueue` was given: a candidate
    (its own weights unless `variables`), a file's path, or a graph with `constants`."""
    from nas.graph import Graph
    from nas.io.candidate import ExportedCandidate, read_graph_or_export_for

    if isinstance(architecture, str | os.PathLike):
        architecture = read_graph_or_export_for("enqueue", os.fspath(architecture))
        if isinstance(architecture, bytes):
            from nas.graph.serialize import load

            architecture, constants = load(architecture)
    if isinstance(architecture, ExportedCandidate):
        graph, constants = architecture.graph, dict(architecture.constants)
        variables = architecture.variables if variables is None else variables
    else:
        graph = architecture
    if not isinstance(graph, Graph):
        raise ValueError(f"enqueue: expected a candidate (nas.load_candidate, "
                         f"nas.from_flax), an exported file's path or a nas.graph.Graph, "
                         f"got {type(architecture).__name__}")
    return graph, dict(constants or {}), variables


def check_weights(graph: Any, constants: dict[str, Any], variables: Any,
                  shape: tuple[int, ...]) -> None:
    """`variables` must have every array the graph's model has, at its shape: one line
    naming the first that differs."""
    import jax
    import jax.numpy as jnp
    from flax.traverse_util import flatten_dict

    from nas.graph import Model

    model = Model(graph, constants)
    x = jax.ShapeDtypeStruct((1, *shape), jnp.float32)
    want = flatten_dict(jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), x),
                        sep="/")
    if not hasattr(variables, "items"):
        raise ValueError(f"enqueue: variables: expected a dict of weights, got "
                         f"{type(variables).__name__}")
    have = flatten_dict(dict(variables), sep="/")
    for name, leaf in want.items():
        if name.startswith("params/") or name.startswith("batch_stats/"):
            got = have.get(name)
            if got is None:
                raise ValueError(f"enqueue: variables: {name} is missing (expected the "
                                 f"architecture's weights)")
            if tuple(jnp.shape(got)) != tuple(leaf.shape):
                raise ValueError(f"enqueue: variables: {name} has shape "
                                 f"{tuple(jnp.shape(got))}, expected {tuple(leaf.shape)}")
