"""Children of reversible parents stay reversible.

Why: a reversible network (`nas.graph.reversible`) can train with device memory flat in
depth only while its couplings `y1 = x1 + f(x2); y2 = x2 + g(y1)` are intact and its
`ReversibleSpec` marking describes the graph exactly. Mutating the plain graph breaks both
(`from_graph` refuses the child). So a reversible parent is mutated through its spec:

* a subgraph mutation inside one block: a coupling function `f` or `g`, or a standard
  layer (stem, transition); the block is mutated as a graph of its own, with its input
  shape from the parent, and must keep its output shape (`ModelMutator` checks it), so
  the coupling structure cannot break;
* or a coupling added (a copy of an existing one, inserted after it) or deleted (in a
  stage with more than one), with `block_add_prob` / `block_delete_prob`.

A child with BatchNorm (which the reversible trainer rejects) is not proposed. The
child's spec is rebuilt from the mutated blocks and its graph from the spec, so
`from_graph` accepts it; op names keep their layer prefixes, so inheritance by name and
shape works across the spec like for any graph.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Mapping
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Graph, OpType
from nas.graph.reversible import RevBlock, ReversibleSpec, from_graph
from nas.mutation.config import MutationConfig
from nas.mutation.model_mutator import (
    ModelMutator,
    NoChildFound,
    Proposal,
    probe_inputs,
    strip_trial,
)
from nas.properties.fingerprint import fingerprint_graph
from nas.properties.tensor_shapes import graph_shapes
from nas.synthesis.base import SynthesisError

MAX_ATTEMPTS = 4  # blocks tried; each block mutation has the config's own retries


def mutable_block_indices(spec: ReversibleSpec) -> list[int]:
    """Indices (in `mutable_blocks()` order) of the blocks a subgraph mutation may edit:
    single-input ones (f, g, the stem); multi-input standard layers and the head are kept."""
    return [i for i, b in enumerate(spec.mutable_blocks())
            if len(b.base_graph.input_names) == 1]


def add_coupling(spec: ReversibleSpec, rng: random.Random) -> ReversibleSpec:
    places = [(b, i) for b, blk in enumerate(spec.blocks) for i in range(len(blk.couplings))]
    if not places:
        raise SynthesisError("no coupling to copy")
    b, i = rng.choice(places)
    blocks = copy.deepcopy(spec.blocks)
    blocks[b].couplings.insert(i + 1, copy.deepcopy(blocks[b].couplings[i]))
    return ReversibleSpec(blocks, spec.head, spec.input_name)


def delete_coupling(spec: ReversibleSpec, rng: random.Random) -> ReversibleSpec:
    places = [(b, i) for b, blk in enumerate(spec.blocks) if len(blk.couplings) > 1
              for i in range(len(blk.couplings))]
    if not places:
        raise SynthesisError("no stage has a coupling to spare")
    b, i = rng.choice(places)
    blocks: list[RevBlock] = copy.deepcopy(spec.blocks)
    del blocks[b].couplings[i]
    return ReversibleSpec(blocks, spec.head, spec.input_name)


def propose_reversible(graph: Graph, constants: Mapping[str, Any], config: MutationConfig,
                       rng: random.Random, child_id: int) -> Proposal:
    """A reversible child of the reversible (graph, constants); NoChildFound if none."""
    spec = from_graph(graph, constants)
    inputs = probe_inputs(graph, config.input_shape)
    shapes = graph_shapes(graph, constants, inputs)
    parent_fp = fingerprint_graph(graph, constants, shapes=shapes)
    parent_out = [shapes.shape(n) for n in graph.output_names]
    reasons: list[str] = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            proposal = _attempt(spec, shapes, config, rng, child_id)
            child_shapes = graph_shapes(proposal.graph, proposal.constants, inputs)
            child_out = [child_shapes.shape(n) for n in proposal.graph.output_names]
            if child_out != parent_out:
                raise SynthesisError(f"child output shapes {child_out} differ from the "
                                     f"parent's {parent_out}")
            proposal.fingerprint = fingerprint_graph(proposal.graph, proposal.constants,
                                                     shapes=child_shapes)
            if proposal.fingerprint == parent_fp:
                raise SynthesisError("child computes the same function as its parent")
            from_graph(proposal.graph, proposal.constants)  # the marking matches, by build
            _check_trainable(proposal.graph)
        except ValueError as e:  # NoChildFound, SynthesisError, shape errors
            reasons.append(f"attempt {attempt}: {e}")
            continue
        proposal.attempts = attempt
        return proposal
    raise NoChildFound("no reversible child found; " + " | ".join(reasons[-4:]))


def _check_trainable(graph: Graph) -> None:
    """The reversible trainer keeps no running statistics: no BatchNorm in a child."""
    bad = [op.name for op in graph.ops if op.type is OpType.BATCH_NORM]
    if bad:
        raise SynthesisError(f"ops {bad[:3]} are BatchNorm, which the reversible trainer "
                             f"does not support")


def _attempt(spec: ReversibleSpec, shapes: Any, config: MutationConfig, rng: random.Random,
             child_id: int) -> Proposal:
    u = rng.random()
    if u < config.block_add_prob:
        child, kind = add_coupling(spec, rng), "coupling_add"
        graph, constants = child.to_graph()
        return Proposal(graph, constants, kind, blocks=child.mutable_blocks())
    if u < config.block_add_prob + config.block_delete_prob and any(
            len(b.couplings) > 1 for b in spec.blocks):
        child, kind = delete_coupling(spec, rng), "coupling_delete"
        graph, constants = child.to_graph()
        return Proposal(graph, constants, kind, blocks=child.mutable_blocks())
    blocks = spec.mutable_blocks()
    index = rng.choice(mutable_block_indices(spec))
    block = blocks[index]
    in_shape = tuple(int(d) for d in shapes.shape(spec.block_inputs()[index][0]))
    sub = dataclasses.replace(config, input_shape=in_shape)
    inner = ModelMutator(sub, rng).propose(block.base_graph, block.base_constants,
                                           child_id=child_id)
    new_blocks = list(blocks)
    new_blocks[index] = Block(f"{strip_trial(block.name)}/trial{child_id}", inner.graph,
                              dict(inner.constants))
    child = spec.with_blocks(new_blocks)
    graph, constants = child.to_graph()
    return Proposal(graph, constants, "reversible_block", inner.spec, inner.properties,
                    blocks=child.mutable_blocks(), host_graph=inner.host_graph,
                    host_constants=inner.host_constants, host_inputs=inner.host_inputs,
                    preserving=inner.preserving)
