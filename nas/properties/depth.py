"""Depth property: how many linear/non-linear alternations lie between inputs and outputs.

Depth is a cheap proxy for expressiveness: a mutation may make a subgraph deeper but a
candidate that is shallower than the target is penalised. Inference is purely structural
(nothing is traced or executed), so abstract and concrete inference are the same.
"""

from __future__ import annotations

import dataclasses
from typing import Self

from nas.graph.ops import Op, OpType, canonical_name
from nas.graph.subgraph import SubgraphModel, rewiring
from nas.properties.base import AbstractProperty, Rng, check_subgraph_model, make_rng
from nas.properties.tensor_shapes import GraphShapes

_NONLINEAR = frozenset({
    OpType.SELF_ATTENTION, OpType.RELU, OpType.GELU, OpType.SWISH, OpType.SIGMOID,
    OpType.SOFTMAX, OpType.RELU6, OpType.TANH, OpType.HARD_SWISH, OpType.LEAKY_RELU, OpType.ELU,
})
_LINEAR = frozenset(t for t in OpType if t not in _NONLINEAR) - {OpType.IDENTITY, OpType.NONE}

DepthMap = dict[str, dict[str, int]]


def is_nonlinear(op: Op) -> bool | None:
    """True for non-linear ops, False for (affine) linear ones, None for IDENTITY, which is
    transparent. NONE carries no dependence at all and has no class (ValueError)."""
    if op.type is OpType.IDENTITY:
        return None
    if op.type in _NONLINEAR:
        return True
    if op.type in _LINEAR:
        return False
    raise ValueError(f"op {op.name!r}: {op.type!r} has no linear/non-linear class")


def _producers(subgraph_model: SubgraphModel) -> dict[str, Op]:
    return {name: op for op in subgraph_model.graph.ops for name in op.output_names}


def compute_depths(subgraph_model: SubgraphModel) -> DepthMap:
    """depth_map[input][output] by a forward pass over the subgraph's ops.

    Each tensor carries, per subgraph input it depends on, the best depth of a path ending
    in a linear op and in a non-linear op. A subgraph input starts in its producer's class
    (a graph input counts as non-linear), so the first alternation at the boundary counts.
    NONE ops cut dependence; IDENTITY ops pass it through unchanged.
    """
    sm = subgraph_model
    producers = _producers(sm)
    graph_inputs = {canonical_name(n) for n in sm.graph.input_names}
    states: dict[str, dict[str, dict[bool, int]]] = {}
    for name in sm.input_names:
        if name in graph_inputs and name not in producers:
            cls = True
        elif name in producers:
            cls = is_nonlinear(producers[name])
            cls = True if cls is None else cls
        else:
            raise ValueError(f"malformed graph: subgraph input {name!r} is produced by no op "
                             f"and is not a graph input")
        states[name] = {name: {cls: 0}}
    ops = [node.op for node in sm.subgraph] if sm.subgraph else list(sm.graph.ops)
    for op in ops:
        if not isinstance(op, Op) or not isinstance(op.type, OpType):
            raise ValueError(f"malformed graph: {op!r} is not an Op with a known OpType")
        merged: dict[str, dict[bool, int]] = {}
        if op.type is not OpType.NONE:
            cls = is_nonlinear(op)
            for tensor in op.input_names:
                if tensor not in states:
                    raise ValueError(f"malformed graph: op {op.name!r} reads {tensor!r}, "
                                     f"which the subgraph neither receives nor computes")
                for source, by_class in states[tensor].items():
                    target = merged.setdefault(source, {})
                    for prev, depth in by_class.items():
                        new_cls = prev if cls is None else cls
                        new_depth = depth + (cls is not None and cls != prev)
                        target[new_cls] = max(target.get(new_cls, -1), new_depth)
        for out in op.output_names:
            states[out] = merged
    depth_map: DepthMap = {}
    for out in sm.output_names:
        if out not in states:
            raise ValueError(f"malformed graph: subgraph output {out!r} is not computed")
        for source, by_class in states[out].items():
            depth_map.setdefault(source, {})[out] = max(by_class.values())
    for old, new in rewiring(sm.subgraph).items():
        for outputs in depth_map.values():
            if new in outputs:
                outputs[old] = outputs[new]
    return depth_map


@dataclasses.dataclass(kw_only=True)
class DepthProperty(AbstractProperty):
    """`depth_map[input][output]`: most alternations on any path (canonical tensor names).

    `delta_max` caps how far one mutation moves a depth.
    """

    depth_map: DepthMap | None = None
    delta_max: int = 2

    def infer(self, subgraph_model: SubgraphModel, abstract: bool = True,
              shapes: GraphShapes | None = None) -> Self:
        """Structural; `abstract` and `shapes` are accepted for the common protocol."""
        return self._with(depth_map=compute_depths(check_subgraph_model(subgraph_model)))

    def mutate(self, rng: Rng = None) -> Self:
        """Moves each depth by up to `delta_max`: the step is the number of consecutive
        successes of a p-coin, with a random sign; depths stay >= 0."""
        self._require_inferred()
        gen = make_rng(rng)
        new_map: DepthMap = {}
        for inp, outputs in self.depth_map.items():
            new_map[inp] = {}
            for out, depth in outputs.items():
                delta = 0
                while delta < self.delta_max and gen.random() < self.p:
                    delta += 1
                if gen.random() < 0.5:
                    delta = -delta
                new_map[inp][out] = max(0, depth + delta)
        return self._with(depth_map=new_map)

    def distance_from(self, other: DepthProperty) -> float:
        """Mean over target entries of the relative shortfall of `other` (1 if missing)."""
        return self._mean_over_entries(other, lambda p: p.depth_map, _depth_shortfall)

    def _require_inferred(self) -> None:
        if self.depth_map is None:
            raise ValueError("DepthProperty has no depth_map yet: call infer() first")


def _depth_shortfall(inp: str, out: str, depth: int, theirs: int | None) -> float:
    """How far short of the target's `depth` (from `inp` to `out`) a candidate's is."""
    if theirs is None:
        return 1.0
    return max(0, depth - theirs) / max(depth, 1)
