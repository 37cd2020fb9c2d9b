"""An earlier stride: a strided op's stride moved to a convolution before it.

`earlier_stride`: S (a CONV or a pool) strides by s; P, a CONV before it with a kernel
wider than one position, does not. The child strides P by s and S by one. What S outputs
keeps its shape, so every op after S is untouched, and every op between P and S runs at
1/s^2 of the positions it had. Every weight keeps its shape and value; P and S are then
fitted to S's output in the parent (`nas.train.fit`, as after a shrink). A pool whose
window no longer fits its input at stride one (VALID padding) pads SAME instead.

What may lie between P and S (the region): ops that act on each position alone
(activations, norms, a DENSE over channels), convolutions and pools at stride one, and
ADD / MUL / CONCAT of the region's tensors; inputs from outside it only from ops that read
nothing (a layer scale's PARAM); and nothing outside the region or S reads it. So a
residual block between P and S moves to the lower resolution whole, both its branches
alike, and no tensor is ever combined with one of another resolution.

Why a kernel wider than one: a 1x1 conv at stride s drops all but one position in s^2
outright instead of summarizing them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nas.graph.ops import Graph, Op, OpType, canonical_name, new_graph
from nas.mutation.move_errors import raised_as
from nas.mutation.net2net import NotApplicable, consumers_of, copied
from nas.mutation.prune import ELEMENTWISE, NORMS, POOLS
from nas.properties.tensor_shapes import graph_shapes

# Ops the region between P and S may hold at any resolution besides convolutions and pools
# at stride one: they act on each position alone, or combine the region's tensors.
PER_POSITION = ELEMENTWISE | NORMS | {OpType.DENSE, OpType.SCALAR_MUL, OpType.ADD, OpType.MUL,
                                      OpType.CONCAT}


def _kwargs(op: Op) -> dict[str, Any]:
    """Where the op keeps its strides and padding: a CONV's op kwargs, a pool's input
    kwargs."""
    return op.op_kwargs if op.type is OpType.CONV else op.input_kwargs


def _tuple(value: Any, rank: int, default: int = 1) -> tuple[int, ...]:
    if value is None:
        value = default
    return (int(value),) * rank if isinstance(value, int) else tuple(int(v) for v in value)


def strides_of(op: Op, rank: int) -> tuple[int, ...]:
    """The op's strides over its `rank` spatial axes (1 where not given)."""
    return _tuple(_kwargs(op).get("strides"), rank)


def _dilated(op: Op, rank: int) -> bool:
    kw = op.op_kwargs
    return any(d != 1 for name in ("input_dilation", "kernel_dilation")
               for d in _tuple(kw.get(name), rank))


def _wide_conv(op: Op, rank: int) -> bool:
    """A CONV at stride one, not dilated, whose kernel covers more than one position."""
    return (op.type is OpType.CONV and strides_of(op, rank) == (1,) * rank
            and not _dilated(op, rank)
            and math.prod(_tuple(op.op_kwargs.get("kernel_size"), rank)) > 1)


def _region(graph: Graph, early: Op, late: Op, rank: int,
            producer: Mapping[str, Op], consumers: Mapping[str, list[Op]],
            outputs: set[str]) -> bool:
    """Whether every op between `early` and `late` may run at another resolution, reads
    only the region (or ops that read nothing), and is read only by the region."""
    after: set[str] = set()
    todo = [early.name]
    by_name = {op.name: op for op in graph.ops}
    while todo:  # every op downstream of `early`, up to `late`
        for t in by_name[todo.pop()].output_names:
            for op in consumers.get(canonical_name(t), []):
                if op.name not in after and op.name != late.name:
                    after.add(op.name)
                    todo.append(op.name)
    before: set[str] = set()
    todo = [late.name]
    while todo:  # every op upstream of `late`
        for t in by_name[todo.pop()].input_names:
            op = producer.get(canonical_name(t))
            if op is not None and op.name not in before:
                before.add(op.name)
                todo.append(op.name)
    if early.name not in before:
        return False
    region = after & before
    inside = region | {early.name}
    for name in region:
        op = by_name[name]
        if not (op.type in PER_POSITION or ((op.type is OpType.CONV or op.type in POOLS)
                                            and strides_of(op, rank) == (1,) * rank)):
            return False
    for name in region | {late.name}:
        for t in by_name[name].input_names:
            source = producer.get(canonical_name(t))
            if source is None or (source.name not in inside and source.input_names):
                return False
    for name in inside:
        for t in by_name[name].output_names:
            t = canonical_name(t)
            if t in outputs or any(op.name not in region and op.name != late.name
                                   for op in consumers.get(t, [])):
                return False
    return True


def stride_moves(graph: Graph, constants: Mapping[str, Any], input_shape: tuple[int, ...]
                 ) -> list[tuple[str, str]]:
    """(P, S) pairs `earlier_stride` may apply to (its shape check still decides), in
    graph order of S, then of P."""
    shapes = graph_shapes(graph, constants, {graph.input_names[0]: tuple(input_shape)})
    producer = {canonical_name(n): op for op in graph.ops for n in op.output_names}
    consumers = consumers_of(graph)
    outputs = {canonical_name(n) for n in graph.output_names}
    found = []
    for s in graph.ops:
        if s.type is not OpType.CONV and s.type not in POOLS:
            continue
        rank = len(shapes.shape(canonical_name(s.output_names[0]))) - 2
        if rank < 1 or all(v == 1 for v in strides_of(s, rank)) or (
                s.type is OpType.CONV and _dilated(s, rank)):
            continue
        found += [(p.name, s.name) for p in graph.ops if _wide_conv(p, rank)
                  and _region(graph, p, s, rank, producer, consumers, outputs)]
    return found


def earlier_stride(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
                   early: str, late: str, input_shape: tuple[int, ...]
                   ) -> tuple[Graph, dict[str, Any], dict[str, Any], list[str]]:
    """(graph, constants, variables, ops to fit): the child where CONV `early` takes the
    stride of `late` and `late` strides by one; NotApplicable where `late`'s output would
    change shape. The fit matches `late`'s output to the parent's (`early`'s has changed
    shape), training `early` and, a CONV, `late`."""
    inputs = {graph.input_names[0]: tuple(input_shape)}
    before = graph_shapes(graph, constants, inputs)
    ops = [copy.deepcopy(op) for op in graph.ops]
    by_name = {op.name: op for op in ops}
    if early not in by_name or late not in by_name:
        raise NotApplicable(f"stride: no ops {early!r} and {late!r}")
    p, s = by_name[early], by_name[late]
    out = canonical_name(s.output_names[0])
    rank = len(before.shape(out)) - 2
    stride = strides_of(s, rank)
    _kwargs(p)["strides"] = stride
    _kwargs(s)["strides"] = (1,) * rank
    child = new_graph(graph.input_names, graph.output_names, ops)
    if s.type in POOLS and _shape(child, constants, inputs, out) != before.shape(out):
        s.input_kwargs["padding"] = "SAME"
        child = new_graph(graph.input_names, graph.output_names, ops)
    after = _shape(child, constants, inputs, out)
    if after != before.shape(out):
        raise NotApplicable(f"stride: moving {late}'s stride to {early} changes its output "
                            f"from {before.shape(out)} to {after}")
    values = {c: copied(e) for c, e in variables.items()}
    return child, dict(constants), values, sorted([early, late])


def _shape(graph: Graph, constants: Mapping[str, Any], inputs: Mapping[str, Any],
           tensor: str) -> tuple[int, ...] | None:
    try:
        return tuple(graph_shapes(graph, constants, dict(inputs)).shape(tensor))
    except ValueError:
        return None


def propose_stride(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
                   rng: np.random.Generator, input_shape: tuple[int, ...]
                   ) -> tuple[str, Graph, dict[str, Any], dict[str, Any], list[str]]:
    """("stride", graph, constants, variables, layers to fit) of one (P, S) pair drawn
    evenly among those whose move keeps S's output shape."""
    with raised_as("stride", NotApplicable):
        choices = stride_moves(graph, constants, input_shape)
        order = rng.permutation(len(choices)) if choices else []
        reasons = []
        for i in order:
            early, late = choices[int(i)]
            try:
                return ("stride", *earlier_stride(graph, constants, variables, early, late,
                                                  input_shape))
            except NotApplicable as e:
                reasons.append(str(e))
        raise NotApplicable("stride: no strided op with a convolution to take its stride"
                            + (f" ({reasons[0]})" if reasons else ""))
