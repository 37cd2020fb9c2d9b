"""Static validation of a graph: everything that can be checked without running it.

A graph that passes is well formed: unique legal names, known op types with the right number
of inputs, every input produced earlier, every output produced, known kwargs with parseable
symbolic values. Errors are `ValueError`s that name the op and the problem.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping
from typing import Any

import flax.linen as nn

from nas.graph import symbolic
from nas.graph.ir import (
    Graph,
    Op,
    OpType,
    canonical_name,
    check_arity,
    check_num_outputs,
    check_op_name,
)

# Op types whose op_kwargs construct a flax module; their allowed kwargs are its fields.
MODULE_TYPES: dict[OpType, type[nn.Module]] = {
    OpType.DENSE: nn.Dense,
    OpType.DENSE_GENERAL: nn.DenseGeneral,
    OpType.CONV: nn.Conv,
    OpType.SELF_ATTENTION: nn.SelfAttention,
    OpType.BATCH_NORM: nn.BatchNorm,
    OpType.LAYER_NORM: nn.LayerNorm,
    OpType.GROUP_NORM: nn.GroupNorm,
    OpType.DROPOUT: nn.Dropout,
}

# Call-time kwargs each op type accepts.
INPUT_KWARGS: dict[OpType, frozenset[str]] = {
    OpType.ADD: frozenset({"layer_drop_rate"}),
    OpType.STOCH_DEPTH: frozenset({"layer_drop_rate"}),
    OpType.SCALAR_MUL: frozenset({"const"}),
    OpType.SCALAR_ADD: frozenset({"const"}),
    OpType.DOT_GENERAL: frozenset({"dimension_numbers", "precision", "preferred_element_type"}),
    OpType.EINSUM: frozenset({"sum"}),
    OpType.CONCAT: frozenset({"axis"}),
    OpType.GELU: frozenset({"approximate"}),
    OpType.LEAKY_RELU: frozenset({"negative_slope"}),
    OpType.ELU: frozenset({"alpha"}),
    OpType.SOFTMAX: frozenset({"axis"}),
    OpType.BATCH_NORM: frozenset({"use_running_average"}),
    OpType.RESHAPE: frozenset({"new_shape", "order"}),
    OpType.TRANSPOSE: frozenset({"axes"}),
    OpType.AVG_POOL: frozenset({"window_shape", "strides", "padding"}),
    OpType.MAX_POOL: frozenset({"window_shape", "strides", "padding"}),
    OpType.MEAN: frozenset({"axis", "keepdims"}),
    OpType.PARAM: frozenset({"init_fn", "shape"}),
}

# The value an optional call-time kwarg means when it is absent (flax's and jnp's defaults).
# Writing the default explicitly computes the same thing: fingerprints read them as equal.
INPUT_KWARG_DEFAULTS: dict[OpType, dict[str, Any]] = {
    OpType.CONCAT: {"axis": -1},
    OpType.GELU: {"approximate": True},
    OpType.LEAKY_RELU: {"negative_slope": 0.01},
    OpType.ELU: {"alpha": 1.0},
    OpType.MEAN: {"keepdims": False},
}

REQUIRED: dict[OpType, tuple[str, ...]] = {
    OpType.DENSE: ("features",),
    OpType.DENSE_GENERAL: ("features",),
    OpType.CONV: ("features", "kernel_size"),
    OpType.SELF_ATTENTION: ("num_heads",),
    OpType.DROPOUT: ("rate",),
    OpType.SCALAR_ADD: ("const",),
    OpType.STOCH_DEPTH: ("layer_drop_rate",),
    OpType.DOT_GENERAL: ("dimension_numbers",),
    OpType.EINSUM: ("sum",),
    OpType.RESHAPE: ("new_shape",),
    OpType.TRANSPOSE: ("axes",),
    OpType.AVG_POOL: ("window_shape",),
    OpType.MAX_POOL: ("window_shape",),
    OpType.MEAN: ("axis",),
    OpType.PARAM: ("init_fn", "shape"),
}

# Kwargs that must resolve to integers (or tuples of integers).
INT_KWARGS = frozenset({
    "features", "feature_group_count", "num_heads", "qkv_features", "out_features",
    "num_groups", "group_size", "kernel_size", "strides", "input_dilation", "kernel_dilation",
    "window_shape", "axes", "shape", "batch_dims",
})
INIT_KWARGS = frozenset({"kernel_init", "bias_init", "scale_init", "init_fn", "embedding_init"})
# Integer kwargs that are sizes: every concrete value must be >= 1 (axes may be negative).
SIZE_KWARGS = INT_KWARGS - {"axes", "batch_dims"}
# Kwargs that are probabilities.
RATE_KWARGS = frozenset({"rate", "layer_drop_rate"})
# Kwargs that take a real number (a `K:` constant keeps its value; it is not made an int).
FLOAT_KWARGS = RATE_KWARGS | {"const", "epsilon", "momentum", "dropout_rate",
                              "negative_slope", "alpha"}
# Call-time kwargs that must be a finite number or a `K:` constant, checked statically.
NUMBER_KWARGS = frozenset({"const", "negative_slope", "alpha"})
# Kwargs that take a bool: a truthy string such as "no" would silently mean True.
BOOL_KWARGS = frozenset({
    "use_bias", "use_scale", "use_running_average", "deterministic", "broadcast_dropout",
    "decode", "normalize_qk", "force_fp32_for_softmax", "use_fast_variance",
    "force_float32_reductions", "approximate", "keepdims",
})
# Bool kwargs that flax also takes as None (its default then applies).
OPTIONAL_BOOL_KWARGS = frozenset({"use_running_average", "deterministic"})
# Int kwargs resolved from `K:` constants, with RESHAPE's shape and the reduction axes.
CONST_INT_KWARGS = INT_KWARGS | {"new_shape", "axis"}


def _concrete_ints(op: Op, key: str, value: Any) -> list[int]:
    """The concrete integers of an int kwarg (symbolic strings are checked when resolved);
    ValueError naming the op when the value is of a kind that cannot be an int size."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            continue  # symbolic ('S:-1*2', 'K:width', 'B'): parsed in _check_value
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"op {op.name!r} kwarg {key!r}: expected an int, a symbolic int "
                             f"or a tuple of them, got {value!r}")
        out.append(item)
    return out


@functools.cache
def module_fields(op_type: OpType) -> frozenset[str]:
    cls = MODULE_TYPES[op_type]
    return frozenset(f.name for f in dataclasses.fields(cls) if f.name not in ("parent", "name"))


def _int_string(text: str, batch: bool) -> bool:
    """Whether a string inside an int kwarg stands for an int ("B" only in RESHAPE shapes)."""
    parsed = symbolic.parse(text)
    if batch and parsed == "B":
        return True
    return (isinstance(parsed, int) and not isinstance(parsed, bool)) or isinstance(
        parsed, symbolic.ShapeRef | symbolic.ConstRef)


def _is_number(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def _is_int_or_const(value: Any) -> bool:
    """An int (not a bool), or a string that parses to one or to a `K:` constant."""
    if isinstance(value, str):
        parsed = symbolic.parse(value)
        return isinstance(parsed, symbolic.ConstRef) or (
            isinstance(parsed, int) and not isinstance(parsed, bool))
    return isinstance(value, int) and not isinstance(value, bool)


def _check_value(op: Op, key: str, value: Any, available: set[str], arity: int) -> None:
    where = f"op {op.name!r} kwarg {key!r}"
    try:
        refs = symbolic.references(value)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    except RecursionError:
        raise ValueError(f"{where}: value is nested too deeply") from None
    if key in INT_KWARGS:
        ints = _concrete_ints(op, key, value)
        low = 0 if key == "window_shape" else 1  # a pool window of 0 spans the whole axis
        if key in SIZE_KWARGS and any(i < low for i in ints):
            raise ValueError(f"{where}: sizes must be {'>= 0' if low == 0 else 'positive'}, "
                             f"got {value!r}")
    if key in RATE_KWARGS and (not refs if isinstance(value, str) else (
            isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 <= value <= 1)):
        raise ValueError(f"{where}: expected a probability in [0, 1], got {value!r}")
    if key in INIT_KWARGS and not isinstance(value, str):
        raise ValueError(f"{where}: expected an initializer like 'I:zeros', got "
                         f"{type(value).__name__} {value!r}"[:300])
    for ref in refs:
        if isinstance(ref, symbolic.InitRef) and not ref.fn[:1].islower():
            raise ValueError(f"{where}: {value!r} names {ref.fn!r}, which is not a flax "
                             f"initializer")
    if key in INT_KWARGS or key == "new_shape":
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if isinstance(item, str) and not _int_string(item, key == "new_shape"):
                raise ValueError(f"{where}: expected an int or symbolic int, got {value!r}")
    if key in BOOL_KWARGS and not isinstance(value, bool) and not (
            value is None and key in OPTIONAL_BOOL_KWARGS):
        raise ValueError(f"{where}: expected True or False, got {value!r}")
    if key in NUMBER_KWARGS and not _is_number(value) and not (
            value is None and key == "const" and op.type is OpType.SCALAR_MUL) and not (
            isinstance(value, str) and (_is_number(symbolic.parse(value)) or (
                refs and isinstance(refs[0], symbolic.ConstRef)))):
        raise ValueError(f"{where}: expected a number or a 'K:' constant, got {value!r}")
    if key == "axis" and op.type is OpType.CONCAT and not _is_int_or_const(value):
        raise ValueError(f"{where}: expected one int axis (or a 'K:' constant), got {value!r}")
    if key in INIT_KWARGS and isinstance(value, str) and not (
        refs and isinstance(refs[0], symbolic.InitRef)
    ):
        raise ValueError(f"{where}: expected an initializer like 'I:zeros', got {value!r}")
    for ref in refs:
        if isinstance(ref, symbolic.ShapeRef):
            if ref.tensor is not None and ref.tensor not in available:
                raise ValueError(f"{where}: {value!r} refers to tensor {ref.tensor!r}, "
                                 f"which no earlier op or graph input produces")
            if ref.input_index is not None and ref.input_index >= max(arity, 1):
                raise ValueError(f"{where}: {value!r} refers to input {ref.input_index}, "
                                 f"but the op has {arity} input(s)")


def validate_op(op: Op, available: set[str]) -> None:
    """Checks one op against the tensors produced before it (canonical names)."""
    if not isinstance(op, Op):
        raise ValueError(f"graph ops must be Op instances, got {type(op).__name__}")
    check_op_name(op.name)
    if not isinstance(op.type, OpType):
        raise ValueError(f"op {op.name!r}: unknown op type {op.type!r}")
    check_num_outputs(op.name, op.type, op.num_outputs)
    if isinstance(op.input_names, str) or not isinstance(op.input_names, list | tuple):
        raise ValueError(f"op {op.name!r}: input_names must be a list of tensor names, got "
                         f"{op.input_names!r}"[:300])
    check_arity(op.name, op.type, op.input_names)
    arity = len(op.input_names)
    for name in op.input_names:
        if not isinstance(name, str) or canonical_name(name) not in available:
            raise ValueError(f"op {op.name!r}: input {name!r} is not produced by an earlier op "
                             f"or a graph input")
    for label, kwargs in (("op_kwargs", op.op_kwargs), ("input_kwargs", op.input_kwargs)):
        if not isinstance(kwargs, Mapping):
            raise ValueError(f"op {op.name!r}: {label} must be a dict")
    allowed_op = module_fields(op.type) if op.type in MODULE_TYPES else frozenset()
    allowed_in = INPUT_KWARGS.get(op.type, frozenset())
    for label, kwargs, allowed in (("op_kwargs", op.op_kwargs, allowed_op),
                                   ("input_kwargs", op.input_kwargs, allowed_in)):
        unknown = sorted(k for k in kwargs if k not in allowed and k != "name")
        if unknown:
            raise ValueError(f"op {op.name!r}: unknown {label} {unknown} for {op.type.name}; "
                             f"expected a subset of {sorted(allowed)}")
    present = {**op.op_kwargs, **op.input_kwargs}
    for key in REQUIRED.get(op.type, ()):
        if key not in present:
            raise ValueError(f"op {op.name!r}: {op.type.name} requires kwarg {key!r}")
    for key, value in present.items():
        _check_value(op, key, value, available, arity)


def check_const_kwarg(op: Op, key: str, raw: Any, value: Any) -> Any:
    """`value`, the resolution of kwarg `key` written `raw`, checked where `raw` reads `K:`
    constants (known only when the graph runs): an int kwarg needs an int (a size >= 1), a
    float kwarg a real number. Integral constants come back as ints."""
    if isinstance(raw, list | tuple):
        return tuple(check_const_kwarg(op, key, r, v) for r, v in zip(raw, value, strict=True))
    ref = symbolic.parse(raw) if isinstance(raw, str) else None
    if not isinstance(ref, symbolic.ConstRef):
        return value
    where = f"op {op.name!r} kwarg {key!r}: graph constant {ref.key!r} ({raw!r}) is {value!r}"
    if key in CONST_INT_KWARGS:
        number = symbolic.as_int(value)
        low = 0 if key == "window_shape" else 1
        if key in SIZE_KWARGS and (number is None or number < low):
            raise ValueError(f"{where}; expected an int >= {low}")
        if number is None:
            raise ValueError(f"{where}; expected an int")
        return number
    if key in FLOAT_KWARGS and not _is_number(value):
        raise ValueError(f"{where}; expected a number")
    if key in RATE_KWARGS and not 0 <= value <= 1:
        raise ValueError(f"{where}; expected a probability in [0, 1]")
    return value


def validate(graph: Graph) -> Graph:
    """Raises ValueError naming the op and the problem if `graph` is malformed; else returns it."""
    if not isinstance(graph, Graph):
        raise ValueError(f"expected a Graph, got {type(graph).__name__}")
    for label, names in (("input_names", graph.input_names), ("output_names", graph.output_names)):
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"graph {label} must be a list of non-empty strings, got {names!r}")
    available = {canonical_name(n) for n in graph.input_names}
    if len(available) != len(graph.input_names):
        raise ValueError(f"graph input names are not unique: {graph.input_names}")
    seen: set[str] = {n.split(":")[0] for n in graph.input_names}
    for op in graph.ops:
        validate_op(op, available)
        if op.name in seen:
            raise ValueError(f"op name {op.name!r} is not unique in the graph")
        seen.add(op.name)
        available.update(op.output_names)
    outputs = [canonical_name(n) for n in graph.output_names]
    for name, canonical in zip(graph.output_names, outputs, strict=True):
        if canonical not in available:
            raise ValueError(f"graph output {name!r} is produced by no op or graph input")
    if len(set(outputs)) != len(outputs):
        raise ValueError(f"graph outputs {graph.output_names} name the same tensor twice")
    return graph
