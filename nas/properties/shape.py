"""Shape property: the shapes a subgraph consumes and produces.

Every candidate must produce its outputs in shapes the rest of the graph accepts, so this
property is always checked. Abstract inference reads the enclosing graph's cached tensor
shapes (`tensor_shapes`) and pushes only the subgraph's own ops through the per-op shape
cache; no FLOPs are spent and the enclosing graph is not re-traced.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

from nas.graph.ops import canonical_name
from nas.graph.subgraph import SubgraphModel, rewiring
from nas.properties.base import AbstractProperty, Rng, check_subgraph_model, make_rng
from nas.properties.concrete import all_tensors, concrete_inputs, concrete_state
from nas.properties.tensor_shapes import (
    GraphShapes,
    MaxSizeError,
    as_spec,
    check_max_size,
    graph_shapes,
)

Shape = tuple[int, ...]


def _written_names(subgraph_model: SubgraphModel) -> dict[str, str]:
    """Canonical -> as-written names of the graph outputs (`"fc/logits:0"` -> `"fc/logits"`)."""
    return {canonical_name(n): n for n in subgraph_model.graph.output_names}


@dataclasses.dataclass(kw_only=True)
class ShapeProperty(AbstractProperty):
    """`input_shapes` / `output_shapes`: tensor name -> shape tuple.

    For a subgraph, keys are the subgraph's canonical input and output tensor names, and an
    output that replaces an old tensor is recorded under the old name too. For a whole graph
    the keys are the graph's input and output names as written.
    """

    input_shapes: dict[str, Shape] | None = None
    output_shapes: dict[str, Shape] | None = None

    def infer(self, subgraph_model: SubgraphModel, abstract: bool = True,
              shapes: GraphShapes | None = None, max_size: int = 0,
              intermediates: bool = False) -> Self:
        """Shapes of `subgraph_model`; `max_size` > 0 raises MaxSizeError (a ValueError
        mentioning max_size) when any tensor has more elements; `intermediates` also
        records every tensor the subgraph computes."""
        sm = check_subgraph_model(subgraph_model)
        graph_inputs = self._graph_inputs(sm)
        if abstract:
            ins, outs = self._infer_abstract(sm, graph_inputs, shapes, max_size, intermediates)
        else:
            ins, outs = self._infer_concrete(sm, graph_inputs, max_size, intermediates)
        for old, new in rewiring(sm.subgraph).items():
            if new in outs:
                outs[old] = outs[new]
        return self._with(input_shapes=ins, output_shapes=outs)

    def _infer_abstract(self, sm: SubgraphModel, graph_inputs: Any, shapes: GraphShapes | None,
                        max_size: int, intermediates: bool) -> tuple[dict, dict]:
        if shapes is None:
            shapes = graph_shapes(sm.graph, sm.constants, graph_inputs)
        if sm.subgraph:
            table = shapes.extend([node.op for node in sm.subgraph], sm.constants)
            ins = {name: table.shape(name) for name in sm.input_names}
            names = ([n for node in sm.subgraph for n in node.op.output_names]
                     if intermediates else sm.output_names)
            outs = {name: table.shape(name) for name in names}
        else:
            table = shapes if shapes.tensors.keys() >= set(sm.output_names) else graph_shapes(
                sm.graph, sm.constants, graph_inputs)
            ins = ({k: tuple(as_spec(v).shape) for k, v in graph_inputs.items()}
                   if graph_inputs else {k: tuple(s.shape) for k, s in table.inputs.items()})
            written = _written_names(sm)
            names = ([n for op in sm.graph.ops for n in op.output_names]
                     if intermediates else sm.output_names)
            outs = {written.get(n, n): table.shape(n) for n in names}
        check_max_size(table, [n for n in table.tensors if n not in table.inputs], max_size)
        return ins, outs

    def _infer_concrete(self, sm: SubgraphModel, graph_inputs: Any, max_size: int,
                        intermediates: bool) -> tuple[dict, dict]:
        if not graph_inputs:
            raise ValueError("concrete shape inference needs the graph input values")
        inputs = concrete_inputs(graph_inputs)
        values = all_tensors(sm, concrete_state(sm, inputs), inputs)
        if max_size > 0:
            for name, value in values.items():
                if value.size > max_size:
                    raise MaxSizeError(f"tensor {name!r} has {value.size} elements, more than "
                                       f"max_size={max_size}")
        if sm.subgraph:
            ins = {n: tuple(values[n].shape) for n in sm.input_names}
            names = ([n for node in sm.subgraph for n in node.op.output_names]
                     if intermediates else sm.output_names)
            return ins, {n: tuple(values[n].shape) for n in names}
        ins = {k: tuple(v.shape) for k, v in inputs.items()}
        written = _written_names(sm)
        names = ([n for op in sm.graph.ops for n in op.output_names]
                 if intermediates else sm.output_names)
        return ins, {written.get(n, n): tuple(values[n].shape) for n in names}

    def mutate(self, rng: Rng = None) -> Self:
        """Drops each output independently with probability p (an output that is absent
        constrains nothing)."""
        self._require_inferred()
        gen = make_rng(rng)
        kept = {k: v for k, v in self.output_shapes.items() if not gen.random() < self.p}
        return self._with(output_shapes=kept)

    def distance_from(self, other: ShapeProperty) -> float:
        """Mean over target outputs of the fraction of dims that differ. Inputs must match
        exactly; each target output must exist in `other` with the same rank and batch size,
        and spatial dims may differ only by one common integer factor (pooling)."""
        self._check_comparable(other)
        self._require_inferred()
        other._require_inferred()
        if len(self.input_shapes) != len(other.input_shapes):
            raise ValueError(f"input count differs: {sorted(self.input_shapes)} vs "
                             f"{sorted(other.input_shapes)}")
        for name, shape in self.input_shapes.items():
            if name not in other.input_shapes:
                raise ValueError(f"input {name!r} is missing from the other property")
            if tuple(other.input_shapes[name]) != tuple(shape):
                raise ValueError(f"input {name!r} has shape {tuple(shape)} here but "
                                 f"{tuple(other.input_shapes[name])} in the other property")
        if self.safety_only or not self.output_shapes:
            return 0.0
        total = 0.0
        for name, shape in self.output_shapes.items():
            if name not in other.output_shapes:
                raise ValueError(f"output {name!r} is missing from the other property")
            total += _output_distance(name, tuple(shape), tuple(other.output_shapes[name]))
        return total / len(self.output_shapes)

    def _require_inferred(self) -> None:
        if self.input_shapes is None or self.output_shapes is None:
            raise ValueError("ShapeProperty has no shapes yet: call infer() first")


def _output_distance(name: str, target: Shape, other: Shape) -> float:
    if len(target) != len(other):
        raise ValueError(f"output {name!r}: rank {len(other)} does not match the target's "
                         f"{len(target)} ({other} vs {target})")
    if target and target[0] != other[0]:
        raise ValueError(f"output {name!r}: batch size {other[0]} does not match the "
                         f"target's {target[0]}")
    spatial = range(1, len(target) - 1)
    if any(target[i] != 1 for i in spatial):
        factors = set()
        for i in spatial:
            if target[i] == 0 or other[i] % target[i]:
                raise ValueError(f"output {name!r}: spatial dim {i} of {other} is not a "
                                 f"multiple of the target's {target}")
            factors.add(other[i] // target[i])
        if len(factors) > 1:
            raise ValueError(f"output {name!r}: spatial dims of {other} are not one common "
                             f"multiple of the target's {target}")
    return sum(a != b for a, b in zip(target, other, strict=True)) / max(len(target), 1)
