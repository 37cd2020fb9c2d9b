"""The graph IR's data types: op types, ops, graphs, and the checks on names and types.

An architecture is a `Graph`: named inputs, named outputs and a topologically ordered list of
`Op`s. Every op produces `num_outputs` tensors named `"<op name>:<index>"`; a bare op name
means output 0. Kwarg values may be symbolic strings (see `nas.graph.symbolic`) that are
resolved against input shapes when the graph runs, so one graph describes a family of widths.

This module imports nothing else of `nas`, so that `symbolic` and `validate` can build on it
and `ops` (the constructors, which validate) on them: the modules of `nas.graph` form a DAG.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

RESERVED_NAME_CHARS = (":", "*", "%")


class OpType(enum.Enum):
    """Every operation the interpreter knows. Definition order matters: synthesis enumerates
    op types in this order. Values are stable and used in serialized graphs.

    Later types sit beside their kin, not at the end: CONCAT with the other multi-input
    ops, the activations after SIGMOID. Synthesis never builds a CONCAT, and builds the
    later activations only where a search space allows them
    (`nas.synthesis.search_space.EXTRA_ACTIVATIONS`), so where they sit changes nothing
    a default search of a graph without them does."""

    NONE = 0
    IDENTITY = 1
    DENSE = 2
    DENSE_GENERAL = 3
    CONV = 4
    ADD = 5
    SCALAR_ADD = 6
    MUL = 25
    CONCAT = 29
    SCALAR_MUL = 7
    DOT_GENERAL = 8
    SELF_ATTENTION = 9
    EINSUM = 10
    RELU = 11
    GELU = 12
    SWISH = 26
    SIGMOID = 28
    RELU6 = 30
    TANH = 31
    HARD_SWISH = 32
    LEAKY_RELU = 33
    ELU = 34
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


# How many input tensors each op type consumes; every type not listed here or in
# VARIADIC_ARITY takes exactly one.
INPUT_ARITY: dict[OpType, int] = {
    OpType.ADD: 2,
    OpType.MUL: 2,
    OpType.DOT_GENERAL: 2,
    OpType.EINSUM: 2,
    OpType.PARAM: 0,
}

# Op types that take a variable number of inputs: the least they take (no upper bound).
# A concatenation of one tensor is an identity in disguise, so CONCAT needs two.
VARIADIC_ARITY: dict[OpType, int] = {
    OpType.CONCAT: 2,
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
    """The number of inputs an op type takes; for a variadic type the least it takes."""
    if op_type in VARIADIC_ARITY:
        return VARIADIC_ARITY[op_type]
    return INPUT_ARITY.get(op_type, 1)


def is_variadic(op_type: OpType) -> bool:
    """Whether the op type takes any number of inputs from `input_arity` up."""
    return op_type in VARIADIC_ARITY


def accepts_inputs(op_type: OpType, count: int) -> bool:
    """Whether an op of this type may have `count` inputs."""
    least = input_arity(op_type)
    return count >= least if is_variadic(op_type) else count == least


def arity_text(op_type: OpType) -> str:
    """The input count an op type takes, for messages: "2", "2 or more"."""
    least = input_arity(op_type)
    return f"{least} or more" if is_variadic(op_type) else str(least)


def check_arity(op_name: str, op_type: OpType, input_names: Any) -> None:
    """ValueError naming the op when it has a number of inputs its type does not take."""
    if not accepts_inputs(op_type, len(input_names)):
        raise ValueError(f"op {op_name!r}: {op_type.name} takes {arity_text(op_type)} "
                         f"input(s), got {len(input_names)}: {list(input_names)}")


def canonical_name(name: str) -> str:
    """A tensor name with its output index: `"conv"` -> `"conv:0"`; `"conv:1"` unchanged."""
    return name if ":" in name else f"{name}:0"


canonicalize_tensor_name = canonical_name  # the reference's name


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


Op.OpType = OpType  # the reference's nested name for the enum


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
