"""`propose_child`: the one call the search driver makes to get a child of a parent.

The child is a valid graph (shape-checked, different fingerprint from its parent) whose
variables are the parent's arrays wherever name, shape and dtype match and fresh values
elsewhere. Everything random comes from `seed`, so the same seed gives the same child.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Graph
from nas.graph.reversible import is_reversible
from nas.graph.serialize import graph_to_dict
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.mutation.config import MutationConfig
from nas.mutation.model_mutator import Builder, ModelMutator, NoChildFound, probe_inputs
from nas.mutation.reversible import propose_reversible
from nas.properties.tensor_shapes import graph_shapes
from nas.synthesis.base import verify_property
from nas.synthesis.variables import build_variables

__all__ = ["Child", "NoChildFound", "propose_child"]


@dataclass
class Child:
    """A proposed child and how it relates to its parent.

    `inherited` / `new` are the op names of the child's params taken from the parent /
    freshly initialized. `properties` are the mutated target properties the new subgraph
    satisfies; they refer to `spec` spliced into `host_graph` (the child graph itself, or
    for a block-level mutation the mutated block's definition).
    """

    graph: Graph
    constants: dict[str, Any]
    variables: dict[str, dict[str, Any]]
    inherited: set[str]
    new: set[str]
    properties: list[Any] = field(default_factory=list)
    spec: list[SubgraphNode] = field(default_factory=list)
    blocks: list[Block] | None = None
    kind: str = "subgraph"
    function_preserving: bool = False
    host_graph: Graph | None = None
    host_constants: dict[str, Any] = field(default_factory=dict)
    host_inputs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    attempts: int = 1
    seconds: float = 0.0

    def spec_json(self) -> list[dict[str, Any]]:
        """The subgraph spec as JSON-ready data: each op as in `graph_to_dict`, plus the
        tensors its outputs replace."""
        out = []
        for node in self.spec:
            op = graph_to_dict(Graph([], [], [node.op]))["ops"][0]
            out.append({"op": op, "output_names": list(node.output_names)})
        return out

    def subgraph_model(self) -> SubgraphModel:
        """The new subgraph inside its host graph (abstract), to re-check `properties`."""
        return SubgraphModel(self.host_graph, self.host_constants, None, self.host_inputs,
                             self.spec)

    def satisfies_properties(self) -> bool:
        if not self.properties:
            return True
        model = self.subgraph_model()
        shapes = graph_shapes(model.graph, model.constants, model.inputs)
        return all(verify_property(p, model, shapes) for p in self.properties)


def propose_child(
    graph: Graph,
    constants: Mapping[str, Any] | None,
    variables: Mapping[str, Any] | None,
    *,
    seed: int,
    config: MutationConfig | Mapping[str, Any] | None = None,
    blocks: list[Block] | None = None,
    builder: Builder | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Child:
    """A child of (graph, constants) with variables inherited from `variables`.

    `variables` holds the parent's `params` (and `batch_stats` if any); None or {} gives a
    child with only fresh variables. Pass `blocks` and a zoo `builder` (see
    `nas.zoo.builder`) for block-level mutation. Raises NoChildFound (a ValueError) with
    the reasons when no child is found within `config.retries` attempts and
    `config.max_steps` synthesis steps (counts: the same seed gives the same child on any
    machine). `clock` serves only the wall-clock safety net `config.time_limit_s`.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    cfg = MutationConfig.from_dict(config)
    start = time.monotonic()
    rng = random.Random(seed)
    child_id = cfg.child_id if cfg.child_id is not None else seed
    if blocks is None and is_reversible(constants):  # the child must stay reversible
        proposal = propose_reversible(graph, constants, cfg, rng, child_id)
    else:
        proposal = ModelMutator(cfg, rng, clock).mutate(graph, constants, blocks, builder, child_id)
    inputs = probe_inputs(proposal.graph, cfg.input_shape)
    built = build_variables(proposal.graph, proposal.constants, inputs, variables, seed=seed)
    return Child(
        graph=proposal.graph,
        constants=proposal.constants,
        variables=built.variables,
        inherited=built.inherited,
        new=built.new,
        properties=proposal.properties,
        spec=proposal.spec,
        blocks=proposal.blocks,
        kind=proposal.kind,
        function_preserving=proposal.preserving,
        host_graph=proposal.host_graph,
        host_constants=proposal.host_constants,
        host_inputs=proposal.host_inputs,
        seed=seed,
        attempts=proposal.attempts,
        seconds=time.monotonic() - start,
    )
