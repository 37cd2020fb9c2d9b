"""The mutator protocol: select a subgraph of a graph and mutate its abstract properties.

One name per operation: `select_subgraph` picks the ops, a property's `mutate` changes
that property, `select_targets` does both (the synthesis targets), and proposing a whole
child is `ModelMutator.propose` / `propose_child`. The reference's names stay callable
beside them: `AbstractMutator.mutate` is `select_targets`.

A mutator does not change the graph: it returns, per context, the selected subgraph (as a
SubgraphModel of the unchanged graph) and the target properties a synthesizer must then
satisfy. Only one randomly chosen context gets mutated properties; the others keep only
their (unmutated) shapes, so the new subgraph still fits every instance of a shared block.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.graph.ops import Graph
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.properties.shape import ShapeProperty
from nas.properties.tensor_shapes import graph_shapes

# (constants, state, graph inputs) of one instance of the graph.
MutationContext = tuple[Mapping[str, Any] | None, Mapping[str, Any] | None, Mapping[str, Any]]


def numpy_rng(rng: random.Random) -> np.random.Generator:
    """A numpy generator drawn from `rng`, for the properties' `mutate(rng)`."""
    return np.random.default_rng(rng.getrandbits(63))


def size_cap(num_ops: int, max_len: int, max_perc: float) -> int:
    """Largest subgraph size: `max_len` ops, or `max_perc` of the graph, at least 1."""
    cap = max_len if max_len > 0 else math.ceil(max_perc * num_ops)
    return max(1, cap) if cap > 0 else max(1, num_ops)


def check_selection_args(p: float, max_len: int, max_perc: float) -> None:
    if not 0 <= p <= 1:
        raise ValueError(f"mutator p must be in [0, 1], got {p}")
    if max_len > 0 and max_perc > 0:
        raise ValueError("set at most one of max_len and max_perc")
    if not 0 <= max_perc <= 1:
        raise ValueError(f"max_perc must be in [0, 1], got {max_perc}")


class AbstractMutator:
    """`properties` are prototypes (settings such as p); they are inferred per subgraph."""

    def __init__(self, properties: Sequence[Any], rng: random.Random | None = None) -> None:
        self.properties = list(properties)
        self.rng = rng if rng is not None else random.Random(0)

    def select_subgraph(self, graph: Graph) -> list[SubgraphNode]:
        raise NotImplementedError

    def select_targets(
        self, graph: Graph, contexts: Sequence[MutationContext], abstract: bool = True
    ) -> list[tuple[SubgraphModel, list[Any]]]:
        """Selects a subgraph and returns, per context, its model and the target properties
        a synthesizer must meet (one context's properties mutated, see the module doc)."""
        if not contexts:
            raise ValueError("select_targets needs at least one (constants, state, inputs) "
                             "context")
        spec = self.select_subgraph(graph)
        new_graph = replace_subgraph(graph, spec)  # self-mapping: the same graph, validated
        to_mutate = self.rng.randrange(len(contexts))
        out = []
        for index, (constants, state, inputs) in enumerate(contexts):
            model = SubgraphModel(new_graph, constants, None if abstract else state, inputs,
                                  spec)
            shapes = graph_shapes(new_graph, constants, inputs)
            if index == to_mutate:
                props = [prop.infer(model, abstract=abstract, shapes=shapes)
                         .mutate(numpy_rng(self.rng)) for prop in self.properties]
            else:
                props = [ShapeProperty().infer(model, abstract=abstract, shapes=shapes)
                         for prop in self.properties if type(prop) is ShapeProperty]
            out.append((model, props))
        # Outputs whose shape constraint was dropped in the mutated context are dropped
        # everywhere, so all instances are held to the same outputs.
        kept = None
        for prop in out[to_mutate][1]:
            if type(prop) is ShapeProperty:
                kept = set(prop.output_shapes)
        if kept is not None:
            for _, props in out:
                for prop in props:
                    if type(prop) is ShapeProperty:
                        prop.output_shapes = {k: v for k, v in prop.output_shapes.items()
                                              if k in kept}
        return out

    def mutate(
        self, graph: Graph, contexts: Sequence[MutationContext], abstract: bool = True
    ) -> list[tuple[SubgraphModel, list[Any]]]:
        """The reference's name for `select_targets` (same arguments, same result)."""
        return self.select_targets(graph, contexts, abstract)
