"""Shapes of every tensor of a graph, computed once per graph and reused everywhere.

The reference re-ran shape inference of the whole enclosing graph for every property of
every subgraph. Here shapes flow op by op: each op's output shapes come from a per-op
`jax.eval_shape`, cached on (op type, resolved kwargs, input shapes), so a graph pass costs
one dict lookup per op once its op kinds have been seen, and a whole-graph `GraphShapes` is
cached per graph content and input shapes. The mutation layer computes a parent's shapes
once with `graph_shapes` and passes them as `shapes=` to every inference on that parent;
`extend` then adds the shapes of a candidate subgraph's ops without touching the parent.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from nas.graph.model import failure_reason, op_failure
from nas.graph.ops import Graph, Op, OpType, canonical_name
from nas.graph.validate import validate_op
from nas.properties import op_cache
from nas.properties.resolved import eval_op_shapes, freeze, resolve_kwargs

Spec = jax.ShapeDtypeStruct

_OP_CACHE: dict[Any, tuple[Spec, ...] | ShapeFailure] = {}
_OP_CACHE_MAX = 50_000
_GRAPH_CACHE: OrderedDict[str, GraphShapes] = OrderedDict()
_GRAPH_CACHE_MAX = 64


class MaxSizeError(ValueError):
    """A tensor has more elements than the `max_size` a caller allows."""


@dataclass
class GraphShapes:
    """Shape and dtype of every tensor reachable from `inputs` (canonical names).

    `tensors` includes the inputs. Treat it as read-only: `extend` returns a new object.
    """

    inputs: dict[str, Spec]
    tensors: dict[str, Spec] = field(default_factory=dict)

    def shape(self, name: str) -> tuple[int, ...]:
        key = canonical_name(name)
        if key not in self.tensors:
            raise ValueError(f"no shape known for tensor {name!r} (shapes were computed for "
                             f"another graph or inputs?)")
        return tuple(self.tensors[key].shape)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and canonical_name(name) in self.tensors

    def extend(self, ops: Iterable[Op], constants: Mapping[str, Any]) -> GraphShapes:
        """These shapes plus those of `ops` (e.g. a candidate subgraph) computed from them."""
        tensors = dict(self.tensors)
        propagate(ops, tensors, constants)
        return GraphShapes(self.inputs, tensors)


def as_spec(value: Any) -> Spec:
    """A ShapeDtypeStruct for an array, a ShapeDtypeStruct or a shape tuple (float32)."""
    if isinstance(value, Spec):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) for d in value):
        return Spec(tuple(value), np.float32)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return Spec(tuple(value.shape), value.dtype)
    raise ValueError(f"cannot read a shape from {type(value).__name__} {value!r}; pass an "
                     f"array, a jax.ShapeDtypeStruct or a shape tuple")


def input_specs(graph: Graph, inputs: Mapping[str, Any] | None) -> dict[str, Spec]:
    """Canonical graph inputs -> specs; every graph input must be present."""
    if not inputs:
        raise ValueError(f"shape inference needs values (or shapes) for the graph inputs "
                         f"{list(graph.input_names)}, got none")
    specs = {canonical_name(k): as_spec(v) for k, v in inputs.items()}
    missing = [n for n in graph.input_names if canonical_name(n) not in specs]
    if missing:
        raise ValueError(f"graph inputs {missing} are missing from the inputs {list(inputs)}")
    return specs


def _op_key(op: Op, op_kw: dict, in_kw: dict, ins: list[Spec]) -> tuple:
    return (op.type, freeze(op_kw), freeze(in_kw),
            tuple((tuple(s.shape), str(s.dtype)) for s in ins), op.num_outputs)


def propagate(ops: Iterable[Op], tensors: dict[str, Spec], constants: Mapping[str, Any]) -> None:
    """Adds the output specs of `ops` (topologically ordered) to `tensors`, in place.

    Raises ValueError naming the op when an op is malformed or its shapes do not fit.
    """
    available = set(tensors)
    for op in ops:
        validate_op(op, available)
        ins = [tensors[n] for n in op.input_names]
        shapes = [tuple(s.shape) for s in ins]
        op_kw, in_kw = resolve_kwargs(op, shapes, tensors, constants)
        outs = _op_shapes(op, op_kw, in_kw, ins)
        if isinstance(outs, ShapeFailure):
            error = op_failure(op, shapes, outs.reason, "failed shape inference")
            raise ValueError(f"malformed graph: {error}") from None
        tensors.update(zip(op.output_names, outs, strict=True))
        available.update(op.output_names)


@dataclass(frozen=True)
class ShapeFailure:
    """Why jax could not trace an op: as much a function of its key as a success is.

    Synthesis tries many ops that do not fit (a group count that does not divide the
    channels, a kernel larger than its input); keeping the reason makes each such op cost
    one trace per store rather than one per try.
    """

    reason: str


def _op_shapes(op: Op, op_kw: dict, in_kw: dict, ins: list[Spec]
               ) -> tuple[Spec, ...] | ShapeFailure:
    key = _op_key(op, op_kw, in_kw, ins)
    outs = _OP_CACHE.get(key)
    if outs is None:
        outs = _stored_shapes(key)
        if outs is None:
            outs = _traced_shapes(op, op_kw, in_kw, ins)
            op_cache.put("shapes", key, {"error": outs.reason} if isinstance(
                outs, ShapeFailure) else [[list(s.shape), str(s.dtype)] for s in outs])
        if len(_OP_CACHE) >= _OP_CACHE_MAX:
            _OP_CACHE.clear()
        _OP_CACHE[key] = outs
    return outs


def _traced_shapes(op: Op, op_kw: dict, in_kw: dict, ins: list[Spec]
                   ) -> tuple[Spec, ...] | ShapeFailure:
    try:
        return tuple(eval_op_shapes(op.type, op_kw, in_kw, ins, op.num_outputs))
    except Exception as e:  # jax reports shape errors as TypeError and friends
        return ShapeFailure(failure_reason(e))


def _stored_shapes(key: tuple) -> tuple[Spec, ...] | ShapeFailure | None:
    stored = op_cache.get("shapes", key)
    if stored is None:
        return None
    if isinstance(stored, dict):
        return ShapeFailure(stored["error"])
    return tuple(Spec(tuple(shape), np.dtype(dtype)) for shape, dtype in stored)


def _graph_key(graph: Graph, constants: Mapping[str, Any], specs: Mapping[str, Spec]) -> str:
    ops = [(op.name, op.type, op.input_names, op.op_kwargs, op.input_kwargs, op.num_outputs)
           for op in graph.ops]
    spec_key = sorted((k, tuple(s.shape), str(s.dtype)) for k, s in specs.items())
    return repr((graph.input_names, ops, sorted(constants.items()), spec_key))


def graph_shapes(
    graph: Graph, constants: Mapping[str, Any] | None, inputs: Mapping[str, Any]
) -> GraphShapes:
    """Shapes of every tensor of `graph` for `inputs` (arrays, specs or shape tuples).

    Cached on the graph's ops, input names, constants and input shapes (not its output
    names), so the graph of a SubgraphModel and its input/output views share one entry.
    """
    if not isinstance(graph, Graph):
        raise ValueError(f"expected a Graph, got {type(graph).__name__}")
    constants = dict(constants or {})
    specs = input_specs(graph, inputs)
    key = _graph_key(graph, constants, specs)
    cached = _GRAPH_CACHE.get(key)
    if cached is not None:
        _GRAPH_CACHE.move_to_end(key)
        return cached
    for op in graph.ops:
        if not isinstance(op, Op) or not isinstance(op.type, OpType):
            raise ValueError(f"malformed graph: {op!r} is not an Op with a known OpType")
    tensors = dict(specs)
    propagate(graph.ops, tensors, constants)
    result = GraphShapes(specs, tensors)
    _GRAPH_CACHE[key] = result
    if len(_GRAPH_CACHE) > _GRAPH_CACHE_MAX:
        _GRAPH_CACHE.popitem(last=False)
    return result


def check_max_size(shapes: GraphShapes, names: Iterable[str], max_size: int) -> None:
    """Raises MaxSizeError if any named tensor has more than `max_size` elements (0: off)."""
    if max_size <= 0:
        return
    for name in names:
        size = math.prod(shapes.shape(name))
        if size > max_size:
            raise MaxSizeError(f"tensor {name!r} has {size} elements, more than "
                               f"max_size={max_size}")


def clear_caches(ops: bool = True, graphs: bool = True) -> None:
    """Forgets cached per-op and/or per-graph shapes (for benchmarks of cold starts)."""
    if ops:
        _OP_CACHE.clear()
    if graphs:
        _GRAPH_CACHE.clear()
