"""Concrete, hashable kwargs of an op, and the single-op models built from them.

Properties never execute a whole graph to learn about one op: they resolve the op's symbolic
kwargs against known tensor shapes and key caches on the result. Resolution here differs
from the interpreter's in one way: initializer strings (`"I:..."`) stay as their text, so a
key is a plain value that hashes the same in every process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from nas.graph import symbolic
from nas.graph.model import Model
from nas.graph.ops import Graph, Op, OpType
from nas.graph.validate import check_const_kwarg

ShapeLike = tuple[int, ...]


def _resolve(value: Any, shapes: Sequence[ShapeLike], tensors: Mapping[str, Any],
             constants: Mapping[str, Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_resolve(v, shapes, tensors, constants) for v in value)
    if isinstance(value, str) and isinstance(symbolic.parse(value), symbolic.InitRef):
        return value
    return symbolic.resolve(value, shapes, tensors, constants)


def resolve_kwargs(
    op: Op, shapes: Sequence[ShapeLike], tensors: Mapping[str, Any],
    constants: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(op_kwargs, input_kwargs) with `S:`/`K:` values resolved and lists made tuples."""

    def one(kwargs: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for key in sorted(kwargs):
            if key == "name":
                continue
            try:
                value = _resolve(kwargs[key], shapes, tensors, constants)
            except ValueError as e:
                raise ValueError(f"op {op.name!r} kwarg {key!r}: {e}") from None
            out[key] = check_const_kwarg(op, key, kwargs[key], value)
        return out

    return one(op.op_kwargs), one(op.input_kwargs)


def freeze(value: Any) -> Any:
    """A hashable, process-independent stand-in for a kwarg value."""
    if isinstance(value, Mapping):
        return tuple((str(k), freeze(v)) for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(value):
        return f"<{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}>"
    return repr(value)


def single_op_model(
    op_type: OpType, op_kw: Mapping[str, Any], in_kw: Mapping[str, Any], num_inputs: int,
    num_outputs: int,
) -> tuple[Model, list[str]]:
    """A Model of one op with concrete kwargs; inputs are named `x0`, `x1`, ..."""
    names = [f"x{i}" for i in range(num_inputs)]
    op = Op("op", op_type, [f"{n}:0" for n in names], dict(in_kw), dict(op_kw), num_outputs)
    return Model(Graph(names, [], [op]), {}), names


def eval_op_shapes(
    op_type: OpType, op_kw: Mapping[str, Any], in_kw: Mapping[str, Any],
    specs: Sequence[jax.ShapeDtypeStruct], num_outputs: int,
) -> list[jax.ShapeDtypeStruct]:
    """Output shapes of one op by `jax.eval_shape`: traced, never computed."""
    model, names = single_op_model(op_type, op_kw, in_kw, len(specs), num_outputs)

    def run(*xs: jax.Array) -> list[jax.Array]:
        out, _ = model.init_with_output(jax.random.PRNGKey(0), dict(zip(names, xs, strict=True)))
        return [out[f"op:{i}"] for i in range(num_outputs)]

    return list(jax.eval_shape(run, *specs))
