"""Subgraphs: splicing a new subgraph into a graph, running parts of it, inheriting weights.

A subgraph spec is a topologically ordered list of `SubgraphNode`s. Each node's
`output_names[i]` names an existing tensor of the host graph that the node's output i
replaces (rewiring), or None when that output is internal to the subgraph.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from nas.graph.model import Model
from nas.graph.ops import Graph, Op, canonical_name, new_graph


@dataclass
class SubgraphNode:
    """An op to splice in, and which existing tensors its outputs replace."""

    op: Op
    output_names: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.op, Op):
            raise ValueError(f"SubgraphNode needs an Op, got {type(self.op).__name__}")
        names = self.output_names
        if isinstance(names, str) or not isinstance(names, Sequence) or not all(
                n is None or (isinstance(n, str) and n) for n in names):
            raise ValueError(f"subgraph node {self.op.name!r}: output_names must be a list of "
                             f"tensor names or None, got {names!r}")
        if self.output_names and len(self.output_names) != self.op.num_outputs:
            raise ValueError(
                f"subgraph node {self.op.name!r}: output_names has {len(self.output_names)} "
                f"entries, the op has {self.op.num_outputs} output(s)"
            )
        self.output_names = [None if n is None else canonical_name(n) for n in self.output_names]


SubgraphSpec = list[SubgraphNode]


def rewiring(subgraph: Sequence[SubgraphNode]) -> dict[str, str]:
    """Old tensor name -> the new tensor that replaces it."""
    mapping = {}
    for node in subgraph:
        for idx, old in enumerate(node.output_names):
            if old is not None:
                mapping[old] = f"{node.op.name}:{idx}"
    return mapping


def _produces(op: Op, name: str) -> bool:
    return canonical_name(name) in op.output_names


def _check_spec(graph: Graph, subgraph: Sequence[SubgraphNode]) -> None:
    """Refuses a spec whose splicing would silently drop or misplace ops: placement keeps
    one op per name and ignores replacements of tensors the graph does not have.

    """
    if not isinstance(graph, Graph):
        raise ValueError(f"replace_subgraph needs a Graph, got {type(graph).__name__}")
    if isinstance(subgraph, str) or not isinstance(subgraph, Sequence):
        raise ValueError(f"subgraph must be a list of SubgraphNode, got "
                         f"{type(subgraph).__name__}")
    for node in subgraph:
        if not isinstance(node, SubgraphNode):
            raise ValueError(f"subgraph entries must be SubgraphNode, got {type(node).__name__}")
    tensors = graph.produced_tensors()
    available = set(tensors)
    replaced: dict[str, str] = {}
    for node in subgraph:
        op = node.op
        for name in op.input_names:
            if canonical_name(name) not in available:
                raise ValueError(f"subgraph op {op.name!r} reads {name!r}, which neither the "
                                 f"graph nor an earlier subgraph op produces")
        available.update(op.output_names)
        for old in node.output_names:
            if old is None:
                continue
            if old not in tensors:
                raise ValueError(f"subgraph node {op.name!r} replaces {old!r}, which is not a "
                                 f"tensor of the graph")
            if old in replaced:
                raise ValueError(f"subgraph nodes {replaced[old]!r} and {op.name!r} both "
                                 f"replace tensor {old!r}")
            replaced[old] = op.name
    if subgraph and not replaced:
        raise ValueError("the subgraph replaces no tensor of the graph: no node has an "
                         "output_names entry naming one")


def replace_subgraph(graph: Graph, subgraph: Sequence[SubgraphNode]) -> Graph:
    """A new graph with `subgraph` spliced in, consumers rewired and dead ops pruned.

    New ops are placed as early as their inputs allow, old ops keep their order, and every op
    that no longer contributes to a graph output is dropped. A new op with the name of a graph
    op replaces that op (its tensors keep their names); an unchanged copy of a graph op (as in
    self-mapping specs) leaves it in place. The arguments are not modified.
    """
    _check_spec(graph, subgraph)
    mapping = rewiring(subgraph)
    outputs = [mapping.get(canonical_name(n), n) for n in graph.output_names]
    graph_inputs = {canonical_name(n) for n in graph.input_names}

    placed: list[Op] = []
    available = set(graph_inputs)
    pending_new = [copy.deepcopy(node.op) for node in subgraph]
    by_name = {op.name: op for op in graph.ops}
    renamed = {node.op.name for node in subgraph
               if node.op.name in by_name and node.op != by_name[node.op.name]}
    old_ops = [copy.deepcopy(op) for op in graph.ops if op.name not in renamed]

    def done() -> bool:
        return all(canonical_name(o) in available for o in outputs)

    def place(op: Op) -> None:
        placed.append(op)
        available.update(op.output_names)

    while not done():
        if pending_new and all(n in available for n in pending_new[0].input_names):
            place(pending_new.pop(0))
            continue
        if not old_ops:
            break
        op = old_ops.pop(0)
        op.input_names = [mapping.get(n, n) for n in op.input_names]
        missing = [n for n in op.input_names if n not in available]
        if missing:
            raise ValueError(f"old op {op.name!r} cannot be placed: its inputs {missing} are not "
                             f"produced earlier (is the subgraph spec topologically sorted?)")
        place(op)
    unproduced = [o for o in outputs if canonical_name(o) not in available]
    if unproduced:
        raise ValueError(f"graph outputs {unproduced} have no producing op after replacement")

    # Reverse pass: keep an op only if a graph output or a kept op needs one of its tensors.
    needed = {canonical_name(o) for o in outputs}
    kept: list[Op] = []
    names: set[str] = set()
    for op in reversed(placed):
        if not needed.intersection(op.output_names):
            continue
        if op.name in names:
            raise ValueError(f"op name {op.name!r} is not unique after replacement")
        names.add(op.name)
        kept.append(op)
        needed.difference_update(op.output_names)
        needed.update(op.input_names)
    dangling = sorted(needed - graph_inputs)
    if dangling:
        raise ValueError(f"inputs {dangling} have no producing op after replacement")
    return new_graph(graph.input_names, outputs, list(reversed(kept)))


def subgraph_inputs(subgraph: Sequence[SubgraphNode]) -> list[str]:
    """Tensors the spec consumes but does not produce, in first-use order."""
    produced: set[str] = set()
    inputs: list[str] = []
    for node in subgraph:
        for name in node.op.input_names:
            if name not in produced and name not in inputs:
                inputs.append(name)
        produced.update(node.op.output_names)
    return inputs


def subgraph_outputs(subgraph: Sequence[SubgraphNode]) -> list[str]:
    """New tensor names of every exported node output."""
    return [
        f"{node.op.name}:{idx}"
        for node in subgraph
        for idx, old in enumerate(node.output_names)
        if old is not None
    ]


def _with_outputs(graph: Graph, output_names: Sequence[str]) -> Graph:
    graph = copy.deepcopy(graph)
    graph.output_names = list(output_names)
    return graph


class SubgraphModel:
    """A graph that already contains `subgraph`, with the three models around it:

    `subg_inputs_model`  graph inputs -> subgraph inputs,
    `subg_outputs_model` graph inputs -> subgraph outputs,
    `subg_model`         subgraph inputs -> subgraph outputs.
    `state=None` (or empty) means abstract: shapes and structure only, nothing executes.
    Without a subgraph, the whole graph is the subgraph.
    """

    def __init__(
        self,
        graph: Graph,
        constants: Mapping[str, Any] | None,
        state: Mapping[str, Any] | None,
        inputs: Mapping[str, Any],
        subgraph: Sequence[SubgraphNode] | None = None,
    ) -> None:
        self.graph = graph
        self.constants = dict(constants or {})
        self.state = state
        self.inputs = inputs
        self.subgraph = list(subgraph or [])
        self.original_outputs = list(graph.output_names)
        self.subg_inputs: dict[str, Any] | None = None
        self.subg_outputs: dict[str, Any] | None = None
        if self.subgraph:
            self.input_names = subgraph_inputs(self.subgraph)
            self.output_names = subgraph_outputs(self.subgraph)
            self.subg_inputs_graph = _with_outputs(graph, self.input_names)
            self.subg_inputs_model = Model(self.subg_inputs_graph, self.constants)
            self.subg_outputs_graph = _with_outputs(graph, self.output_names)
            self.subg_outputs_model = Model(self.subg_outputs_graph, self.constants)
            self.subg_graph = new_graph(
                self.input_names, self.output_names, [node.op for node in self.subgraph]
            )
            self.subg_model = Model(self.subg_graph, self.constants)
        else:
            self.input_names = [canonical_name(n) for n in graph.input_names]
            self.output_names = [canonical_name(n) for n in graph.output_names]
            self.subg_inputs_graph = None
            self.subg_inputs_model = None
            self.subg_inputs = dict(inputs) if inputs else None
            self.subg_outputs_graph = copy.deepcopy(graph)
            self.subg_outputs_model = Model(self.subg_outputs_graph, self.constants)
            self.subg_graph = self.subg_outputs_graph
            self.subg_model = self.subg_outputs_model

    @property
    def abstract(self) -> bool:
        return not self.state

    def _require_state(self) -> Mapping[str, Any]:
        if not self.state:
            raise ValueError("cannot execute a subgraph model without state (it is abstract)")
        return self.state

    def get_subg_inputs(self, graph_inputs: Mapping[str, Any], intermediates: bool = False):
        """Values of the subgraph inputs (and, optionally, of every tensor before them)."""
        if self.subg_inputs_model is None:
            return dict(graph_inputs)
        model = self.subg_inputs_model
        if intermediates:
            model = Model(_with_outputs(self.subg_inputs_graph, []), self.constants)
        return model.apply(self._require_state(), dict(graph_inputs))

    def get_default_subg_inputs(self) -> dict[str, Any]:
        if self.subg_inputs is None:
            self.subg_inputs = self.get_subg_inputs(self.inputs)
        return self.subg_inputs

    def get_subg_outputs(self, graph_inputs: Mapping[str, Any]) -> dict[str, Any]:
        return self.subg_outputs_model.apply(self._require_state(), dict(graph_inputs))

    def execute_subg(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return self.subg_model.apply(self._require_state(), dict(inputs))

    def get_default_subg_outputs(self) -> dict[str, Any]:
        if self.subg_outputs is None:
            self.subg_outputs = self.execute_subg(self.get_default_subg_inputs())
        return self.subg_outputs

    def update_subg_outputs(self, output_names: Sequence[str]) -> None:
        """Exports other tensors of the subgraph (each must be produced by a subgraph op)."""
        produced = {n for op in self.subg_graph.ops for n in op.output_names}
        for name in output_names:
            if canonical_name(name) not in produced:
                raise ValueError(f"{name!r} is not produced by an op of the subgraph")
        self.output_names = [canonical_name(n) for n in output_names]
        self.subg_graph = _with_outputs(self.subg_graph, self.output_names)
        self.subg_model = Model(self.subg_graph, self.constants)
        self.subg_outputs_graph = _with_outputs(self.subg_outputs_graph, self.output_names)
        self.subg_outputs_model = Model(self.subg_outputs_graph, self.constants)
        self.subg_outputs = None


def _signature(tree: Any) -> Any:
    return jax.tree.map(lambda a: (tuple(jnp.shape(a)), jnp.result_type(a)), tree)


def inherit_params(
    new_params: Mapping[str, Any], old_params: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Splits `new_params` (flat per op) into (inherited from old, freshly initialized).

    An op's entry is inherited only when the parent has an entry of the same name whose
    arrays have the same tree structure, shapes and dtypes; a same-named op whose shapes
    changed (e.g. a dense layer whose input width changed) stays new.
    """
    for label, params in (("new_params", new_params), ("old_params", old_params)):
        if params is not None and not isinstance(params, Mapping):
            raise ValueError(f"inherit_params: {label} must be a dict of params by op name, "
                             f"got {type(params).__name__}")
    inherited: dict[str, Any] = {}
    new: dict[str, Any] = {}
    for name, value in (new_params or {}).items():
        old = old_params.get(name) if old_params else None
        same = old is not None and (
            jax.tree.structure(old) == jax.tree.structure(value)
            and _signature(old) == _signature(value)
        )
        (inherited if same else new)[name] = old if same else value
    return inherited, new
