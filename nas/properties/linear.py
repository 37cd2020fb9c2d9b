"""Linear-operator property: how each output dim mixes each input dim (see `pairing`).

Abstract inference interprets the subgraph with pairings as values: every op's own pairing
comes from a process-wide cache keyed on the op type, its resolved kwarg VALUES and its
input shapes (reduced to the smallest shapes with the same pairing where that is exact), so
a Jacobian is computed once per op kind and never again; shapes come from the enclosing
graph's cached `GraphShapes`. Concrete inference executes the subgraph and reads pairings
from the sparsity of its vector-Jacobian products.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Self

import jax
import jax.numpy as jnp
import numpy as np

from nas.graph import symbolic
from nas.graph.model import Model, OpError, spatial_rank
from nas.graph.ops import Op, OpType, canonical_name
from nas.graph.subgraph import SubgraphModel, rewiring
from nas.graph.validate import INIT_KWARGS
from nas.properties import op_cache
from nas.properties.base import AbstractProperty, Rng, check_subgraph_model, make_rng
from nas.properties.concrete import all_tensors, concrete_inputs, concrete_state
from nas.properties.pairing import Mapping_, Pairing, Pairings, jacobian_pairings
from nas.properties.resolved import freeze, resolve_kwargs, single_op_model
from nas.properties.tensor_shapes import GraphShapes, graph_shapes

__all__ = ["LinopProperty", "Pairing", "abstract_pairings", "clear_cache", "op_pairings"]

# Ops that act on every element independently (in inference mode): any dim of size >= 2
# pairs exactly like a dim of size 2, so their cache key uses dims capped at 2.
_ELEMENTWISE = frozenset({
    OpType.RELU, OpType.GELU, OpType.SWISH, OpType.SIGMOID, OpType.SCALAR_ADD,
    OpType.SCALAR_MUL, OpType.DROPOUT, OpType.STOCH_DEPTH, OpType.ADD, OpType.MUL,
    OpType.BATCH_NORM, OpType.SOFTMAX, OpType.RELU6, OpType.TANH, OpType.HARD_SWISH,
    OpType.LEAKY_RELU, OpType.ELU,
})
_OP_PAIRINGS: dict[Any, list[list[Pairing]]] = {}


def _cap(shape: Sequence[int], dims: Sequence[int] | None = None) -> tuple[int, ...]:
    dims = range(len(shape)) if dims is None else dims
    return tuple(min(n, 2) if i in dims else n for i, n in enumerate(shape))


def _unspatial(op_type: OpType, shape: tuple[int, ...], kw: Mapping[str, Any],
               size_key: str) -> tuple[int, ...]:
    """The axes a conv kernel or pool window does not span: features, and the batch axis
    of a batched input (an unbatched one has none, as in flax)."""
    spatial = spatial_rank(op_type, shape, kw, size_key)
    return (0, len(shape) - 1) if len(shape) == spatial + 2 else (len(shape) - 1,)


def _canonical(op_type: OpType, op_kw: dict, in_kw: dict,
               shapes: list[tuple[int, ...]]) -> tuple[dict, list[tuple[int, ...]]]:
    """The smallest problem with the same pairing: only reductions proven exact are made
    (a dim of size >= 2 that is mapped one-to-one or all-to-one keeps its pairing at 2)."""
    op_kw = {k: v for k, v in op_kw.items() if k not in INIT_KWARGS}  # structure, not init
    batch_stats = op_type is OpType.BATCH_NORM and in_kw.get("use_running_average") is False
    if op_type in _ELEMENTWISE and not batch_stats:  # batch statistics couple the batch
        return op_kw, [_cap(s) for s in shapes]
    if op_type is OpType.DENSE:
        return {**op_kw, "features": min(op_kw["features"], 2)}, [_cap(s) for s in shapes]
    if op_type is OpType.CONV and op_kw.get("feature_group_count", 1) == 1 and not any(
        k in op_kw for k in ("input_dilation", "mask")
    ):
        (shape,) = shapes
        return ({**op_kw, "features": min(op_kw["features"], 2)},
                [_cap(shape, _unspatial(op_type, shape, op_kw, "kernel_size"))])
    if op_type is OpType.LAYER_NORM and not {"reduction_axes", "feature_axes"} & set(op_kw):
        return op_kw, [_cap(s) for s in shapes]
    if op_type in (OpType.MAX_POOL, OpType.AVG_POOL):
        (shape,) = shapes
        return op_kw, [_cap(shape, _unspatial(op_type, shape, in_kw, "window_shape"))]
    if op_type is OpType.CONCAT and len({len(s) for s in shapes}) == 1 and shapes[0]:
        # Every other axis is copied one-to-one; the concatenated axis keeps its sizes,
        # which decide the input the centre output element comes from.
        rank = len(shapes[0])
        axis = in_kw.get("axis", -1)
        if isinstance(axis, int) and -rank <= axis < rank:
            keep = axis % rank
            return op_kw, [_cap(s, [d for d in range(rank) if d != keep]) for s in shapes]
    return op_kw, shapes


def op_pairings(op_type: OpType, op_kw: Mapping[str, Any], in_kw: Mapping[str, Any],
                shapes: Sequence[tuple[int, ...]], num_outputs: int = 1) -> list[list[Pairing]]:
    """`result[output index][input index]`: the pairing of one op with resolved kwargs on
    inputs of these shapes. Computed once per key by a Jacobian on ones, cached in memory
    and, where `op_cache` is enabled, on disk."""
    op_kw, shapes = _canonical(op_type, dict(op_kw), dict(in_kw), [tuple(s) for s in shapes])
    key = (op_type, freeze(op_kw), freeze(in_kw), tuple(shapes), num_outputs)
    result = _OP_PAIRINGS.get(key)
    if result is None:
        stored = op_cache.get("pairings", key)
        if stored is not None:
            result = [[Pairing(np.reshape(np.asarray(flat, np.int8), shape))
                       for shape, flat in per_out] for per_out in stored]
        else:
            result = _jacobian_op_pairings(op_type, op_kw, in_kw, shapes, num_outputs)
            op_cache.put("pairings", key,
                         [[[p.mappings.shape, p.mappings.ravel().tolist()] for p in per_out]
                          for per_out in result])
        _OP_PAIRINGS[key] = result
    return result


def _jacobian_op_pairings(op_type: OpType, op_kw: dict, in_kw: Mapping[str, Any],
                          shapes: list[tuple[int, ...]], num_outputs: int
                          ) -> list[list[Pairing]]:
    model, names = single_op_model(op_type, op_kw, in_kw, len(shapes), num_outputs)
    xs = {n: jnp.ones(s, jnp.float32) for n, s in zip(names, shapes, strict=True)}
    try:
        # Random positive weights drawn on the host: running flax's initializers eagerly
        # compiled one small program per primitive and shape (1-3 s per new key), and
        # only which gradients are nonzero matters here, not the weights' distribution.
        outs, abstract = jax.eval_shape(
            lambda v: model.init_with_output(jax.random.PRNGKey(0), v), xs)
        gen = np.random.default_rng(0)
        state = jax.tree.map(lambda a: gen.uniform(1.0, 2.0, a.shape).astype(a.dtype),
                             abstract)
        found = jacobian_pairings(lambda st, v: model.apply(st, v), state, xs)
    except Exception as e:  # jax reports bad shapes as TypeError and friends
        raise ValueError(f"cannot compute the pairing of a {op_type.name} op with kwargs "
                         f"{op_kw} {dict(in_kw)} on inputs {shapes}: "
                         f"{e.reason if isinstance(e, OpError) else e}") from None
    result = []
    for i in range(num_outputs):
        out_rank = outs[f"op:{i}"].ndim
        per_out = found.get(f"op:{i}", {})
        result.append([per_out.get(n, Pairing([[0] * out_rank] * len(s)))
                       for n, s in zip(names, shapes, strict=True)])
    return result


def clear_cache() -> None:
    """Forgets every cached per-op pairing (for benchmarks measuring cold starts)."""
    _OP_PAIRINGS.clear()


def abstract_pairings(ops: Sequence[Op], input_names: Sequence[str], shapes: GraphShapes,
                      constants: Mapping[str, Any]) -> dict[str, dict[str, Pairing]]:
    """Pairings of every tensor computed by `ops` with respect to `input_names`, by
    composing per-op pairings. `shapes` must know every tensor the ops read."""
    values: dict[str, dict[str, Pairing]] = {
        canonical_name(n): {canonical_name(n): Pairing.identity(len(shapes.shape(n)))}
        for n in input_names
    }
    for op in ops:
        missing = [n for n in op.input_names if n not in values and n not in shapes]
        if missing:
            raise ValueError(f"malformed graph: op {op.name!r} reads {missing}, which is "
                             f"neither a subgraph input nor computed before it")
        ins = [values.get(n, {}) for n in op.input_names]
        if op.type is OpType.IDENTITY:
            values[op.output_names[0]] = dict(ins[0])
            continue
        if op.type is OpType.NONE or not any(ins):
            for out in op.output_names:
                values[out] = {}
            continue
        in_shapes = [shapes.shape(n) for n in op.input_names]
        op_kw, in_kw = resolve_kwargs(op, in_shapes, shapes.tensors, constants)
        per_op = op_pairings(op.type, op_kw, in_kw, in_shapes, op.num_outputs)
        for out, per_input in zip(op.output_names, per_op, strict=True):
            merged: dict[str, Pairing] = {}
            for incoming, pairing in zip(ins, per_input, strict=True):
                for source, p in incoming.items():
                    composed = p.compose(pairing)
                    merged[source] = merged[source].join(composed) if source in merged \
                        else composed
            values[out] = {s: p for s, p in merged.items() if p.any()}
    return values


@dataclasses.dataclass(kw_only=True)
class LinopProperty(AbstractProperty):
    """`pairings[output][input]`: a `Pairing` per pair that depends on each other.

    For a subgraph, names are canonical tensor names (`"add0:0"`, `"dense0:0"`) and a
    rewired output is recorded under the old tensor's name too; for a whole graph they are
    the graph's input and output names as written.
    """

    pairings: Pairings | None = None

    def infer(self, subgraph_model: SubgraphModel, abstract: bool = True,
              shapes: GraphShapes | None = None) -> Self:
        sm = check_subgraph_model(subgraph_model)
        if abstract:
            pairings = self._infer_abstract(sm, shapes)
        else:
            pairings = self._infer_concrete(sm)
        for old, new in rewiring(sm.subgraph).items():
            if new in pairings:
                pairings[old] = dict(pairings[new])
        return self._with(pairings=pairings)

    def _infer_abstract(self, sm: SubgraphModel, shapes: GraphShapes | None) -> Pairings:
        if shapes is None:
            shapes = graph_shapes(sm.graph, sm.constants, self._graph_inputs(sm))
        if sm.subgraph:
            ops = [node.op for node in sm.subgraph]
            table = shapes.extend(ops, sm.constants)
            values = abstract_pairings(ops, sm.input_names, table, sm.constants)
            return {o: dict(values[o]) for o in sm.output_names if values.get(o)}
        values = abstract_pairings(sm.graph.ops, sm.graph.input_names, shapes, sm.constants)
        written = {canonical_name(n): n for n in sm.graph.input_names}
        return {o: {written[s]: p for s, p in values[canonical_name(o)].items()}
                for o in sm.graph.output_names if values.get(canonical_name(o))}

    def _infer_concrete(self, sm: SubgraphModel) -> Pairings:
        graph_inputs = self._graph_inputs(sm)
        if not graph_inputs:
            raise ValueError("concrete pairing inference needs the graph input values")
        inputs = concrete_inputs(graph_inputs)
        state = concrete_state(sm, inputs)
        if not sm.subgraph:
            model = Model(sm.graph, sm.constants)
            return jacobian_pairings(lambda st, xs: model.apply(st, xs), state, inputs)
        values = all_tensors(sm, state, inputs)
        xs = {n: values[n] for n in sm.input_names}
        referenced = {
            ref.tensor for node in sm.subgraph
            for kwargs in (node.op.op_kwargs, node.op.input_kwargs) for v in kwargs.values()
            for ref in symbolic.references(v)
            if isinstance(ref, symbolic.ShapeRef) and ref.tensor is not None
        }
        extras = {n: values[n] for n in referenced if n not in xs}
        model = sm.subg_model
        return jacobian_pairings(lambda st, v: model.apply(st, {**extras, **v}), state, xs)

    def mutate(self, rng: Rng = None) -> Self:
        """Drops each (output, input) entry independently with probability p."""
        self._require_inferred()
        gen = make_rng(rng)
        kept: Pairings = {}
        for out, per_input in self.pairings.items():
            row = {inp: p for inp, p in per_input.items() if not gen.random() < self.p}
            if row:
                kept[out] = row
        return self._with(pairings=kept)

    def distance_from(self, other: LinopProperty) -> float:
        """Mean over target entries of the fraction of paired dims that `other` mixes less
        strongly than the target (a missing entry in `other` counts as no pairing)."""
        return self._mean_over_entries(other, lambda p: p.pairings, _pairing_shortfall)

    def _require_inferred(self) -> None:
        if self.pairings is None:
            raise ValueError("LinopProperty has no pairings yet: call infer() first")


def _pairing_shortfall(out: str, inp: str, mine: Pairing, theirs: Pairing | None) -> float:
    """The fraction of the target's paired dims (`out` <- `inp`) that a candidate mixes
    less strongly (all of them where it has no such entry)."""
    if theirs is None:
        weaker = int((mine.mappings > Mapping_.NONE).sum())
    elif theirs.mappings.shape != mine.mappings.shape:
        raise ValueError(
            f"pairing {out!r} <- {inp!r} has shape {mine.mappings.shape} here but "
            f"{theirs.mappings.shape} in the other property (different ranks)")
    else:
        weaker = int((mine.mappings > theirs.mappings).sum())
    return weaker / max(int((mine.mappings > 0).sum()), 1)
