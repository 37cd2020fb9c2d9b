"""The graph IR's constructors, `new_op` and `new_graph`, beside its data types.

The types live in `nas.graph.ir` (re-exported here, so `from nas.graph.ops import Graph`
keeps working); `new_graph` validates with `nas.graph.validate`, which itself builds on
`ir`, so no module of `nas.graph` imports one that imports it back.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from nas.graph.ir import (
    INPUT_ARITY,
    MULTI_OUTPUT_TYPES,
    RESERVED_NAME_CHARS,
    VARIADIC_ARITY,
    Graph,
    Op,
    OpType,
    accepts_inputs,
    arity_text,
    as_op_type,
    canonical_name,
    canonicalize_tensor_name,
    check_arity,
    check_num_outputs,
    check_op_name,
    input_arity,
    is_variadic,
    op_of_tensor,
)
from nas.graph.validate import validate

__all__ = [
    "INPUT_ARITY", "MULTI_OUTPUT_TYPES", "RESERVED_NAME_CHARS", "VARIADIC_ARITY", "Graph", "Op",
    "OpType", "accepts_inputs", "arity_text", "as_op_type", "canonical_name",
    "canonicalize_tensor_name", "check_arity", "check_num_outputs", "check_op_name",
    "input_arity", "is_variadic", "new_graph", "new_op", "op_of_tensor",
]


def new_op(
    op_name: str,
    op_type: OpType | str,
    input_names: Sequence[str],
    input_kwargs: Mapping[str, Any] | None = None,
    op_kwargs: Mapping[str, Any] | None = None,
    num_outputs: int = 1,
) -> Op:
    """Builds an op with canonical input names and private copies of its kwargs."""
    check_op_name(op_name)
    op_type = as_op_type(op_type, op_name)
    if isinstance(input_names, str) or not isinstance(input_names, Sequence):
        raise ValueError(f"op {op_name!r}: input_names must be a list of tensor names")
    for name in input_names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"op {op_name!r}: input name {name!r} is not a non-empty string")
    for label, kwargs in (("input_kwargs", input_kwargs), ("op_kwargs", op_kwargs)):
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ValueError(f"op {op_name!r}: {label} must be a dict, got {kwargs!r}")
    check_num_outputs(op_name, op_type, num_outputs)
    return Op(
        name=op_name,
        type=op_type,
        input_names=[canonical_name(n) for n in input_names],
        input_kwargs=copy.deepcopy(dict(input_kwargs or {})),
        op_kwargs=copy.deepcopy(dict(op_kwargs or {})),
        num_outputs=num_outputs,
    )


def new_graph(
    input_names: Sequence[str], output_names: Sequence[str], ops: Sequence[Op]
) -> Graph:
    """Builds a validated graph from copies of its arguments (see `nas.graph.validate`).

    Op input names are stored canonical, as `new_op` stores them, so that ops built
    directly (or loaded from a file) with bare names like "input" work everywhere.
    """
    for label, value in (("input_names", input_names), ("output_names", output_names),
                         ("ops", ops)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ValueError(f"graph {label} must be a list, got {type(value).__name__} "
                             f"{value!r}"[:300])
    graph = Graph(
        input_names=list(copy.deepcopy(list(input_names))),
        output_names=list(copy.deepcopy(list(output_names))),
        ops=copy.deepcopy(list(ops)),
    )
    for op in graph.ops:
        if isinstance(op, Op) and isinstance(op.input_names, list):
            op.input_names = [canonical_name(n) if isinstance(n, str) and n else n
                              for n in op.input_names]
    validate(graph)
    return graph
