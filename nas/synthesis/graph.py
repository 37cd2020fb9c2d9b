"""Graph synthesis: rebuild a subgraph with several inputs and outputs, edge by edge.

The subgraph is cut into *nodes* (ops a chain cannot rebuild: binary ops, reshapes, rank
changes, and ops whose output fans out or is both exported and used inside) and *edges*
(maximal chains of single-input ops between a source tensor and a node input or an
exported output). Nodes are kept; each non-empty edge is re-synthesized by a sequential
synthesizer against its own properties, inferred from the old edge and mutated (an
internal edge keeps its shapes, so tensors meeting at a node still fit). With probability
`p` a branch into an ADD or MUL is dropped instead when a no-op placeholder satisfies its
properties. The assembled subgraph must satisfy the subgraph's own target properties; if
not, the edges are re-synthesized (until `max_attempts` or the budget).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nas.graph.ops import Op, OpType, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.synthesis.base import (
    AbstractSynthesizer,
    Budget,
    Context,
    SynthesisError,
    SynthesisTimeout,
)
from nas.synthesis.sequential import is_shape_property

NODE_TYPES = frozenset({OpType.RESHAPE, OpType.FLATTEN, OpType.TRANSPOSE, OpType.EINSUM,
                        OpType.ADD, OpType.MUL, OpType.DOT_GENERAL, OpType.MEAN,
                        OpType.DENSE_GENERAL, OpType.SELF_ATTENTION, OpType.PARAM,
                        OpType.CONCAT})
# A CONCAT's branch is never dropped: its channels are part of the concatenation's shape.
BRANCH_DROP_TYPES = (OpType.ADD, OpType.MUL)

SequentialCtor = Callable[[Sequence[Context]], AbstractSynthesizer]


@dataclass
class Edge:
    source: str  # tensor the chain starts from (old name)
    ops: list[Op]  # the old chain, possibly empty
    sink: str  # old tensor the chain produces (== source when empty)
    exported: bool  # the chain ends at a subgraph output


def _chainable(op: Op) -> bool:
    return op.type not in NODE_TYPES and len(op.input_names) == 1 and op.num_outputs == 1


def decompose(spec: Sequence[SubgraphNode]) -> tuple[list[SubgraphNode], list[Edge]]:
    """(node entries in spec order, edges) of a subgraph spec."""
    exported = {n for node in spec for n in node.output_names if n is not None}
    consumers: dict[str, int] = {}
    for node in spec:
        for name in node.op.input_names:
            consumers[name] = consumers.get(name, 0) + 1
    by_output = {node.op.output_names[0]: node for node in spec}
    is_chain = {}
    for node in spec:
        out = node.op.output_names[0]
        internal = consumers.get(out, 0) == 1 and out not in exported
        ends_output = consumers.get(out, 0) == 0 and out in exported
        is_chain[node.op.name] = _chainable(node.op) and (internal or ends_output)

    def trace(tensor: str) -> tuple[str, list[Op]]:
        chain = []
        while tensor in by_output and is_chain[by_output[tensor].op.name]:
            op = by_output[tensor].op
            chain.append(op)
            tensor = op.input_names[0]
        return tensor, chain[::-1]

    nodes = [node for node in spec if not is_chain[node.op.name]]
    edges = []
    for node in nodes:
        for name in node.op.input_names:
            source, chain = trace(name)
            edges.append(Edge(source, chain, name, exported=False))
    for node in spec:
        out = node.op.output_names[0]
        if is_chain[node.op.name] and out in exported:
            source, chain = trace(out)
            edges.append(Edge(source, chain, out, exported=True))
    return nodes, edges


class GraphSynthesizer(AbstractSynthesizer):
    """`sequential_ctr(contexts)` builds the sequential synthesizer for one edge (bind the
    generation, rng, budget and synthesis settings with functools.partial)."""

    def __init__(
        self,
        subgraphs_and_props: Sequence[Context],
        generation: int | str,
        sequential_ctr: SequentialCtor,
        abstract: bool = True,
        p: float = 0.0,  # fifth, as in the reference
        rng: random.Random | None = None,
        budget: Budget | None = None,
        max_attempts: int = 3,
    ) -> None:
        super().__init__(subgraphs_and_props, generation, abstract, rng, budget)
        if not 0 <= p <= 1:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.sequential_ctr = sequential_ctr
        self.p = p
        self.max_attempts = max_attempts
        first = self.subgraphs_and_props[0][0]
        if not first.subgraph:
            raise ValueError("graph synthesis needs a subgraph spec")
        self.nodes, self.edges = decompose(first.subgraph)
        if not any(edge.ops for edge in self.edges):
            raise SynthesisError("the subgraph has no chain of single-input ops to rebuild")

    def _edge_contexts(self, edge: Edge) -> list[Context]:
        """Per context: the old edge as a self-mapping subgraph of the context's graph, with
        its properties (mutated in the first context; internal edges keep their shapes)."""
        spec = [SubgraphNode(op, []) for op in edge.ops[:-1]]
        spec.append(SubgraphNode(edge.ops[-1], [edge.sink]))
        out = []
        for index, ((model, props), shapes) in enumerate(zip(self.subgraphs_and_props,
                                                             self.shapes, strict=True)):
            edge_model = SubgraphModel(model.graph, model.constants, None, model.inputs, spec)
            edge_props = []
            for prop in props:
                if index > 0 and not is_shape_property(prop):
                    continue
                inferred = prop.infer(edge_model, abstract=True, shapes=shapes)
                if is_shape_property(prop) and not edge.exported or index > 0:
                    edge_props.append(inferred)
                else:
                    rng = np.random.default_rng(self.rng.getrandbits(63))
                    edge_props.append(inferred.mutate(rng))
            out.append((edge_model, edge_props))
        return out

    def _drops_branch(self, edge: Edge, contexts: list[Context]) -> bool:
        """Whether a no-op placeholder (NONE) satisfies the edge's properties."""
        placeholder = new_op(f"{self.prefix}none", OpType.NONE, [edge.source])
        synth = AbstractSynthesizer(contexts, self.generation)
        return synth.verify(synth.candidate_models([SubgraphNode(placeholder, [edge.sink])]))

    def _attempt(self) -> list[SubgraphNode]:
        renamed: dict[str, str] = {}  # old tensor -> new tensor
        new_chains: dict[int, list[Op]] = {}
        dropped: set[int] = set()
        counter = 0
        for index, edge in enumerate(self.edges):
            self.check_deadline()
            if not edge.ops:
                continue
            contexts = self._edge_contexts(edge)
            consumer = next((n for n in self.nodes if edge.sink in n.op.input_names), None)
            if (not edge.exported and consumer is not None
                    and consumer.op.type in BRANCH_DROP_TYPES and not dropped
                    and self.rng.random() < self.p and self._drops_branch(edge, contexts)):
                dropped.add(index)
                continue
            models = self.sequential_ctr(contexts).synthesize()
            chain = []
            for node in models[0].subgraph:
                op = copy.deepcopy(node.op)
                op.name = f"{self.prefix}edge{index}/{op.type.name.lower()}/{counter}"
                counter += 1
                chain.append(op)
            new_chains[index] = chain
        # Assemble: nodes in spec order, each preceded by the chains feeding it.
        for node in self.nodes:
            for n in node.op.output_names:
                renamed[n] = f"{self.prefix}{node.op.name}:{n.rsplit(':', 1)[1]}"
        spec: list[SubgraphNode] = []

        def emit_edge(index: int) -> str:
            edge = self.edges[index]
            source = renamed.get(edge.source, edge.source)
            chain = new_chains.get(index)
            if not chain:
                return source
            previous = source
            for op in chain:
                op.input_names = [previous]
                previous = op.output_names[0]
            for op in chain[:-1]:
                spec.append(SubgraphNode(op, []))
            spec.append(SubgraphNode(chain[-1], [edge.sink] if edge.exported else []))
            return previous

        edge_of_sink = {(e.sink, e.exported): i for i, e in enumerate(self.edges)}
        for node in self.nodes:
            op = copy.deepcopy(node.op)
            op.name = f"{self.prefix}{node.op.name}"
            inputs = []
            for name in node.op.input_names:
                index = edge_of_sink[(name, False)]
                inputs.append(None if index in dropped else emit_edge(index))
            if None in inputs:
                kept = [n for n in inputs if n is not None]
                op = new_op(op.name, OpType.IDENTITY, kept[:1])
            else:
                op.input_names = inputs
            spec.append(SubgraphNode(op, list(node.output_names)))
        for index, edge in enumerate(self.edges):
            if edge.exported:
                emit_edge(index)
        return spec

    def synthesize(self) -> list[SubgraphModel]:
        reasons = []
        for _ in range(self.max_attempts):
            self.check_deadline()
            try:
                spec = self._attempt()
                models = self.make_subgraph_models(spec)
            except SynthesisTimeout:
                raise
            except SynthesisError as e:
                reasons.append(str(e))
                continue
            except ValueError as e:
                reasons.append(f"assembled subgraph is malformed: {e}")
                continue
            if self.verify(models):
                return models
            reasons.append("assembled subgraph does not satisfy the subgraph's properties")
        raise SynthesisError(f"graph synthesis failed after {self.max_attempts} attempts: "
                             f"{'; '.join(reasons[-3:])}")
