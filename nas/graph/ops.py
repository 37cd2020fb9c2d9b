"""The graph IR: op types, ops, graphs and their constructors.

An architecture is a `Graph`: named inputs, named outputs and a topologically ordered list of
`Op`s. Every op produces `num_outputs` tensors named `"<op name>:<index>"`; a bare op name
means output 0. Kwarg values may be symbolic strings (see `nas.graph.symbolic`) that are
resolved against input shapes when the graph runs, so one graph describes a family of widths.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RESERVED_NAME_CHARS = (":", "*", "%")


class OpType(enum.Enum):
    """Every operation the interpreter knows. Definition order matters: synthesis enumerates
    op types in this order. Values are stable and used in serialized graphs."""

    NONE = 0
    IDENTITY = 1
    DENSE = 2
    DENSE_GENERAL = 3
    CONV = 4
    ADD = 5
    SCALAR_ADD = 6
    MUL = 25
    SCALAR_MUL = 7
    DOT_GENERAL = 8
    SELF_ATTENTION = 9
    EINSUM = 10
    RELU = 11
    GELU = 12
    SWISH = 26
    SIGMOID = 28
    SOFTMAX = 13
    BATCH_NORM = 14
    LAYER_NORM = 15
    GROUP_NORM = 16
    RESHAPE = 17
    FLATTEN = 18
    TRANSPOSE = 19
    DROPOUT = 20
    STOCH_DEPTH = 27
    AVG_POOL = 21
    MAX_POOL = 22
    MEAN = 23
    PARAM = 24


# How many input tensors each op type consumes; every type not listed takes exactly one.
INPUT_ARITY: dict[OpType, int] = {
    OpType.ADD: 2,
    OpType.MUL: 2,
    OpType.DOT_GENERAL: 2,
    OpType.EINSUM: 2,
    OpType.PARAM: 0,
}


# Op types that produce several tensors; every other type produces exactly one.
MULTI_OUTPUT_TYPES: frozenset[OpType] = frozenset()


def check_num_outputs(op_name: str, op_type: OpType, num_outputs: Any) -> None:
    """An int >= 1 (not a bool), and 1 unless the op type produces several tensors."""
    if not isinstance(num_outputs, int) or isinstance(num_outputs, bool) or num_outputs < 1:
        raise ValueError(f"op {op_name!r}: num_outputs must be a positive int, got {num_outputs!r}")
    if num_outputs != 1 and op_type not in MULTI_OUTPUT_TYPES:
        raise ValueError(f"op {op_name!r}: {op_type.name} has one output, got "
                         f"num_outputs={num_outputs}")


def input_arity(op_type: OpType) -> int:
    return INPUT_ARITY.get(op_type, 1)


def canonical_name(name: str) -> str:
    """A tensor name with its output index: `"conv"` -> `"conv:0"`; `"conv:1"` unchanged."""
    return name if ":" in name else f"{name}:0"


def op_of_tensor(name: str) -> str:
    """The op (or graph input) that produces a tensor: `"conv:1"` -> `"conv"`."""
    return name.rsplit(":", 1)[0] if ":" in name else name


@dataclass
class Op:
    """One node of a graph. `op_kwargs` construct the layer, `input_kwargs` are passed when
    calling it. Mutable and compared by value, like the reference IR."""

    name: str
    type: OpType
    input_names: list[str]
    input_kwargs: dict[str, Any] = field(default_factory=dict)
    op_kwargs: dict[str, Any] = field(default_factory=dict)
    num_outputs: int = 1

    __hash__ = None  # type: ignore[assignment]

    @property
    def output_names(self) -> list[str]:
        return [f"{self.name}:{i}" for i in range(self.num_outputs)]


@dataclass
class Graph:
    """Named inputs, named outputs and ops in topological order."""

    input_names: list[str]
    output_names: list[str]
    ops: list[Op]

    __hash__ = None  # type: ignore[assignment]

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise ValueError(f"graph has no op named {name!r}")

    def produced_tensors(self) -> set[str]:
        """Canonical names of every tensor available in the graph (inputs and op outputs)."""
        names = {canonical_name(n) for n in self.input_names}
        for op in self.ops:
            names.update(op.output_names)
        return names


def check_op_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"op name must be a non-empty string, got {name!r}")
    for char in RESERVED_NAME_CHARS:
        if char in name:
            raise ValueError(
                f"op name {name!r} contains the reserved character {char!r} "
                f"(':', '*' and '%' delimit symbolic values)"
            )
    return name


def as_op_type(op_type: Any, op_name: str = "?") -> OpType:
    """Accepts an `OpType` or its name (any case); anything else is a ValueError."""
    if isinstance(op_type, OpType):
        return op_type
    if isinstance(op_type, str) and op_type.upper() in OpType.__members__:
        return OpType[op_type.upper()]
    raise ValueError(
        f"op {op_name!r}: unknown op type {op_type!r}; expected one of "
        f"{', '.join(OpType.__members__)}"
    )


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
    from nas.graph.validate import validate  # validate needs Graph; import here, no cycle

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
