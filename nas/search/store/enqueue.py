"""What `Study.enqueue` reads an architecture of the user's with, to train it next,
before any proposal, and how a study counts its seeds.

Why enqueue: a user often knows a model worth trying (a colleague's, a paper's, last month's
best); enqueued on a study that has its seeds (one that ran once, finished or not), before
the search resumes or while it runs, it is trained as a seed is (it has no parent:
its own weights when given, else from scratch), comes before any proposed child in the
claim order (`Study.claim`), and is a parent for proposals like every other result. It
counts toward `search.max_candidates`: a finished search trains it once that is raised.
"""

from __future__ import annotations

import os
from typing import Any

from nas.search.store.meta import SEEDS, SEEDS_ADDED


def seeding(study: Any) -> tuple[int | None, int]:
    """(seeds planned, seeds added) of `study`: (None, 0) before its first seed."""
    if not study.last_id():
        return None, 0
    planned = study.get_state(SEEDS, None)
    if planned is None:  # one seed, or a study written before there could be several
        return 1, 1
    return int(planned), int(study.get_state(SEEDS_ADDED, 0))


def architecture_parts(architecture: Any, constants: dict[str, Any] | None,
                       variables: dict[str, Any] | None
                       ) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables) of what `Study.enqueue` was given: a candidate
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
