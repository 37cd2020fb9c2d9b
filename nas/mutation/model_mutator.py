"""Whole-model mutation: one subgraph mutation of a graph, or a block-level edit.

`ModelMutator.propose` turns a parent into a child architecture (graph, constants, blocks)
or raises `NoChildFound` saying why. Block-level mutation (§6.5, with `mutate_by_block`,
the parent's blocks and a zoo builder) adds a copy of a block (`block_add_prob`), deletes
one (`block_delete_prob`), or else redefines one block by a subgraph mutation of its
definition (renamed `<block>/trial<id>`; each other instance of that block takes the new
definition with probability `block_mutate_prob`), and rebuilds the model with the zoo
builder; otherwise a subgraph of the whole graph is replaced. Every child has valid shapes
and a fingerprint different from its parent's, computed here once and carried along.

The reference's names stay callable: `mutate` (the reference's 4-tuple, all None when no
child is found) wraps `propose`, and `mutate_block` is `redefine_block`.
"""

from __future__ import annotations

import copy
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from nas.graph.block import Block
from nas.graph.ops import Graph
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.mutation.config import MutationConfig
from nas.mutation.preserve import preserving_spec
from nas.properties.fingerprint import fingerprint_graph
from nas.properties.shape import ShapeProperty
from nas.properties.tensor_shapes import GraphShapes, graph_shapes
from nas.synthesis.base import Budget, SynthesisError, SynthesisTimeout, verify_property

Builder = Callable[..., tuple[Graph, dict[str, Any], list[Block]]]


class NoChildFound(ValueError):
    """No valid child was found within the configured limits; the message says why."""


@dataclass
class Proposal:
    """A child architecture before its variables are built."""

    graph: Graph
    constants: dict[str, Any]
    kind: str  # "subgraph", "block_add", "block_delete" or "block_mutate"
    spec: list[SubgraphNode] = field(default_factory=list)
    properties: list[Any] = field(default_factory=list)
    blocks: list[Block] | None = None
    host_graph: Graph | None = None  # the graph `spec` and `properties` refer to
    host_constants: dict[str, Any] = field(default_factory=dict)
    host_inputs: dict[str, Any] = field(default_factory=dict)
    preserving: bool = False
    attempts: int = 1
    fingerprint: str = ""  # of the child graph (set once its shapes are checked)
    # child op -> the parent's op it continues (`renamed_ops`): a redefined block's ops
    # are renamed with it, so only this map lets them take their old weights
    renamed: dict[str, str] = field(default_factory=dict)


def probe_inputs(graph: Graph, input_shape: Sequence[int]) -> dict[str, jax.ShapeDtypeStruct]:
    if len(graph.input_names) != 1:
        raise ValueError(f"mutation probes single-input graphs; this one has inputs "
                         f"{graph.input_names}")
    return {graph.input_names[0]: jax.ShapeDtypeStruct(tuple(input_shape), jnp.float32)}


def fingerprint_at(graph: Graph, constants: Mapping[str, Any] | None,
                   input_shape: Sequence[int]) -> str:
    """The fingerprint a child of this input shape gets (`Child.fingerprint`), for graphs
    that are not proposed children (a search's seed), so equal networks match."""
    return fingerprint_graph(graph, dict(constants or {}), probe_inputs(graph, input_shape))


def strip_trial(name: str) -> str:
    match = re.fullmatch(r"(.+)/trial[0-9]+", name)
    return match.group(1) if match else name


def renamed_ops(parent_blocks: Sequence[Block], child_blocks: Sequence[Block]
                ) -> dict[str, str]:
    """Child op name -> parent op name, for each op of a renamed block instance (a redefined
    block, `<block>/trial<id>`) that the parent's instance at the same position also had
    (same name in the block's definition). Both lists are instantiated blocks of equal
    length, whose instance ops follow their definition's ops in order."""
    renamed = {}
    for mine, theirs in zip(child_blocks, parent_blocks, strict=True):
        if mine.name == theirs.name:
            continue  # same name, same op names: inherited by name already
        their_ops = {base.name: op.name
                     for base, op in zip(theirs.base_graph.ops, theirs.graph.ops, strict=True)}
        for base, op in zip(mine.base_graph.ops, mine.graph.ops, strict=True):
            if base.name in their_ops:
                renamed[op.name] = their_ops[base.name]
    return renamed


class ModelMutator:
    """Proposes children of one parent. `rng` is the only source of randomness."""

    def __init__(self, config: MutationConfig | Mapping[str, Any] | None = None,
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = MutationConfig.from_dict(config)
        self.rng = rng if rng is not None else random.Random(0)
        self.clock = clock  # only for the wall-clock safety net; limits are counts

    # Block-level edits -------------------------------------------------------------------

    def add_block(self, blocks: Sequence[Block]) -> list[Block]:
        new_blocks = list(blocks)
        index = self.rng.randrange(len(blocks))
        new_blocks.insert(index + 1, copy.deepcopy(blocks[index]))
        return new_blocks

    def delete_block(self, blocks: Sequence[Block]) -> list[Block]:
        new_blocks = list(blocks)
        new_blocks.pop(self.rng.randrange(len(blocks)))
        return new_blocks

    def redefine_block(self, block: Block, blocks: Sequence[Block],
                       spec: Sequence[SubgraphNode], child_id: int) -> list[Block]:
        """The blocks with `block`'s definition replaced: one same-named block always, each
        other same-named block with probability block_mutate_prob (so repeats may diverge)."""
        new_base = replace_subgraph(block.base_graph, spec)
        new_name = f"{strip_trial(block.name)}/trial{child_id}"
        new_blocks = copy.deepcopy(list(blocks))
        same = [i for i, b in enumerate(blocks) if b.name == block.name]
        chosen = self.rng.choice(same)
        for i in same:
            if i == chosen or self.rng.random() < self.config.block_mutate_prob:
                new_blocks[i] = Block(new_name, new_base, dict(blocks[i].base_constants or {}))
        return new_blocks

    def mutate_block(self, block_to_mutate: Block, parent_blocks: Sequence[Block],
                     subgraph: Sequence[SubgraphNode], child_id: int) -> list[Block]:
        """The reference's name for `redefine_block`."""
        return self.redefine_block(block_to_mutate, parent_blocks, subgraph, child_id)

    # Subgraph mutation -------------------------------------------------------------------

    def _synthesize(self, graph: Graph, contexts: list, child_id: int, deadline: Budget
                    ) -> tuple[list[SubgraphNode], list[Any], list[SubgraphNode], int]:
        """(new spec, target properties, selected old spec, index of the mutated context)."""
        mutator = self.config.make_mutator(self.rng)
        selected = mutator.select_targets(graph, contexts)
        if self.config.synthesizer == "primer":  # primer ignores all but the shapes
            selected = [(m, [p for p in props if type(p) is ShapeProperty])
                        for m, props in selected]
        synth = self.config.make_synthesizer(selected, child_id, self.rng, deadline)
        models = synth.synthesize()
        for model, (_, props) in zip(models, selected, strict=True):
            shapes = graph_shapes(model.graph, model.constants, model.inputs)
            failed = [type(p).__name__ for p in props if not verify_property(p, model, shapes)]
            if failed:
                raise SynthesisError(f"the synthesized subgraph does not satisfy {failed}")
        mutated = max(range(len(selected)), key=lambda i: len(selected[i][1]))
        return list(models[0].subgraph), selected[mutated][1], selected[0][0].subgraph, mutated

    def _check_child(self, graph: Graph, constants: Mapping[str, Any], inputs: Mapping[str, Any],
                     parent_fp: str, parent_out: Sequence[tuple]) -> str:
        """The child's fingerprint; SynthesisError if its outputs or function are wrong."""
        shapes = graph_shapes(graph, constants, inputs)
        child_out = [shapes.shape(n) for n in graph.output_names]
        if child_out != list(parent_out):
            raise SynthesisError(f"child output shapes {child_out} differ from the parent's "
                                 f"{list(parent_out)}")
        fingerprint = fingerprint_graph(graph, constants, shapes=shapes)
        if fingerprint == parent_fp:
            raise SynthesisError("child computes the same function as its parent "
                                 "(equal fingerprints)")
        return fingerprint

    def propose(self, graph: Graph, constants: Mapping[str, Any] | None,
                blocks: Sequence[Block] | None = None, builder: Builder | None = None,
                child_id: int = 0) -> Proposal:
        """A child architecture of (graph, constants); NoChildFound if none is found."""
        cfg = self.config
        constants = dict(constants or {})
        start = self.clock()
        deadline = Budget(cfg.max_steps, cfg.time_limit_s, self.clock)
        inputs = probe_inputs(graph, cfg.input_shape)
        parent_shapes = graph_shapes(graph, constants, inputs)
        parent_fp = fingerprint_graph(graph, constants, shapes=parent_shapes)
        parent_out = [parent_shapes.shape(n) for n in graph.output_names]
        by_block = bool(blocks) and builder is not None and cfg.mutate_by_block
        if by_block:
            # Stored blocks hold only their definitions; instances know their input tensors,
            # which the block is synthesized for, and their op names, which inherit weights.
            _, _, blocks = builder(blocks=list(blocks))
        reasons: list[str] = []
        for attempt in range(1, max(cfg.retries, 1) + 1):
            try:
                if by_block:
                    proposal = self._block_attempt(graph, constants, blocks, builder, child_id,
                                                   inputs, parent_shapes, deadline)
                else:
                    proposal = self._graph_attempt(graph, constants, inputs, child_id, deadline)
                proposal.fingerprint = self._check_child(
                    proposal.graph, proposal.constants, inputs, parent_fp, parent_out)
            except SynthesisTimeout as e:
                reasons.append(str(e))
                break
            except ValueError as e:  # SynthesisError, malformed candidates, no subgraph
                reasons.append(f"attempt {attempt}: {e}")
                continue
            proposal.attempts = attempt
            return proposal
        net = " [wall-clock safety net expired]" if deadline.safety_net_expired else ""
        raise NoChildFound(
            f"no child found in {deadline.steps} synthesis steps{net} "
            f"(limits: {cfg.retries} attempts, {cfg.max_steps} steps; "
            f"{self.clock() - start:.1f}s); " + " | ".join(reasons[-4:]))

    def mutate(self, parent_graph: Graph, parent_constants: Mapping[str, Any] | None,
               parent_blocks: Sequence[Block] | None, model_fn: Builder | None,
               child_id: int) -> tuple[Graph | None, dict[str, Any] | None,
                                       list[Block] | None, SubgraphModel | None]:
        """The reference's call: `(new_graph, new_constants, new_blocks, subgraph_model)`,
        all None when no child is found (`propose` says why instead). A child made without
        blocks comes back as one block `model<child_id>`; `subgraph_model` is the replaced
        subgraph in the graph it was synthesized for (None for a block added or deleted)."""
        try:
            proposal = self.propose(parent_graph, parent_constants, parent_blocks, model_fn,
                                    child_id)
        except NoChildFound:
            return None, None, None, None
        blocks = proposal.blocks if proposal.blocks is not None else [
            Block(f"model{child_id}", proposal.graph, dict(proposal.constants))]
        subgraph_model = SubgraphModel(proposal.host_graph, proposal.host_constants, None,
                                       proposal.host_inputs, proposal.spec) \
            if proposal.host_graph is not None else None
        return proposal.graph, proposal.constants, blocks, subgraph_model

    def _graph_attempt(self, graph: Graph, constants: dict[str, Any], inputs: dict[str, Any],
                       child_id: int, deadline: Budget) -> Proposal:
        contexts = [(constants, None, inputs)]
        spec, props, old_spec, _ = self._synthesize(graph, contexts, child_id, deadline)
        if self.config.function_preserving:
            fp_spec = preserving_spec(old_spec, spec, f"gen{child_id}/")
            try:
                fp_graph = replace_subgraph(graph, fp_spec)
                model = SubgraphModel(fp_graph, constants, None, inputs, fp_spec)
                shapes = graph_shapes(fp_graph, constants, inputs)
                if all(verify_property(p, model, shapes) for p in props):
                    return Proposal(fp_graph, constants, "subgraph", fp_spec, props,
                                    host_graph=fp_graph, host_constants=constants,
                                    host_inputs=inputs, preserving=True)
            except ValueError:
                pass  # fall back to the replacing child
        new_graph = replace_subgraph(graph, spec)
        return Proposal(new_graph, constants, "subgraph", spec, props, host_graph=new_graph,
                        host_constants=constants, host_inputs=inputs)

    def _block_attempt(self, graph: Graph, constants: dict[str, Any], blocks: Sequence[Block],
                       builder: Builder, child_id: int, inputs: dict[str, Any],
                       parent_shapes: GraphShapes, deadline: Budget) -> Proposal:
        cfg = self.config
        u = self.rng.random()
        if u < cfg.block_add_prob:
            new_blocks, kind = self.add_block(blocks), "block_add"
        elif u < cfg.block_add_prob + cfg.block_delete_prob and len(blocks) > 1:
            new_blocks, kind = self.delete_block(blocks), "block_delete"
        else:
            block = self.rng.choice(list(blocks))
            contexts = []
            for b in blocks:
                if b.name != block.name:
                    continue
                block_inputs = {
                    base: jax.ShapeDtypeStruct(parent_shapes.shape(actual), jnp.float32)
                    for base, actual in zip(b.base_graph.input_names, b.graph.input_names,
                                            strict=True)}
                contexts.append((dict(b.base_constants or {}), None, block_inputs))
            spec, props, _, mutated = self._synthesize(block.base_graph, contexts, child_id,
                                                       deadline)
            new_blocks = self.redefine_block(block, blocks, spec, child_id)
            host = replace_subgraph(block.base_graph, spec)
            child_graph, child_constants, built = builder(blocks=new_blocks)
            return Proposal(child_graph, dict(child_constants), "block_mutate", spec, props,
                            blocks=built, host_graph=host,
                            host_constants=dict(contexts[mutated][0]),
                            host_inputs=contexts[mutated][2],
                            renamed=renamed_ops(blocks, built))
        child_graph, child_constants, built = builder(blocks=new_blocks)
        return Proposal(child_graph, dict(child_constants), kind, blocks=built)

