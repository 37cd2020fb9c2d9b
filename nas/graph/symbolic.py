"""Symbolic kwarg values, parsed once and resolved against tensor shapes at trace time.

Forms (the canonical suffix order is `BASE%D*M`, i.e. `value // D * M`):
  `"S:<i>"`          dim i of the op's first input          `"S:-1*2"` doubles the channels
  `"S:<j>:<i>"`      dim i of the op's j-th input (j an integer)
  `"S:<T>:<i>"`      dim i of an earlier tensor T           `"S:input:-1"`
  `"K:<name>"`       a constant of the graph, as it is      `"K:num_classes"`, `"K:rate"`
  `"I:<fn>[:k:v]*"`  a flax initializer                     `"I:normal:stddev:1e-6"`
  `"B"`              the batch size (RESHAPE only)
Resolution never writes back into the graph: it returns new values. A `K:` constant with
factors must be an int; without, it is returned unchanged and the kwarg it feeds decides what
it may be (`nas.graph.validate.check_const_kwarg`).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flax.linen import initializers

from nas.graph.ir import canonical_name

_NO_KWARG_INITS = ("zeros", "ones")


@dataclass(frozen=True)
class ShapeRef:
    """`S:` reference: a dim of an input (by position) or of a named tensor."""

    dim: int
    input_index: int | None  # position among the op's inputs
    tensor: str | None  # canonical tensor name
    div: int
    mul: int


@dataclass(frozen=True)
class ConstRef:
    """`K:` reference to a named graph constant."""

    key: str
    div: int
    mul: int


@dataclass(frozen=True)
class InitRef:
    """`I:` reference to a flax initializer and its keyword arguments."""

    fn: str
    kwargs: tuple[tuple[str, Any], ...]


def _to_number(text: str) -> int | float | None:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return None


def _factor(text: str, what: str, value: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"symbolic value {value!r}: {what} {text!r} is not a positive int")
    return int(text)


def _split_factors(text: str, value: str) -> tuple[str, int, int]:
    base, mul, div = text, 1, 1
    if base.count("*") > 1 or base.count("%") > 1:
        raise ValueError(f"symbolic value {value!r}: at most one '*' and one '%' are allowed")
    if "*" in base:
        base, mul_text = base.split("*")
        mul = _factor(mul_text, "multiplier", value)
    if "%" in base:
        base, div_text = base.split("%")
        div = _factor(div_text, "divisor", value)
    if not base:
        raise ValueError(f"symbolic value {value!r} has nothing before its factor")
    return base, div, mul


def split_factors(value: str) -> tuple[str, int, int]:
    """`"S:-1%4*2"` -> `("S:-1", 4, 2)`: the base reference, its divisor and multiplier."""
    return _split_factors(value, value)


@functools.lru_cache(maxsize=4096)
def parse(value: str) -> Any:
    """Parses one string value into a number, "B", a literal, or a symbolic reference.

    Strings without ':' that are not numbers are literals (e.g. "SAME" or an einsum spec).
    A string with ':' must be an `S:`, `K:` or `I:` reference, else ValueError.
    """
    if value == "B":
        return "B"
    number = _to_number(value)
    if number is not None:
        return number
    if ":" not in value:
        return value
    prefix, rest = value.split(":", 1)
    if prefix == "I":
        fn, *pairs = rest.split(":")
        if not fn or not hasattr(initializers, fn):
            raise ValueError(f"symbolic value {value!r}: unknown flax initializer {fn!r}")
        if len(pairs) % 2:
            raise ValueError(f"symbolic value {value!r}: initializer kwargs must be "
                             "key:value pairs")
        if fn in _NO_KWARG_INITS and pairs:
            raise ValueError(f"symbolic value {value!r}: initializer {fn!r} takes no kwargs")
        kwargs = tuple(
            (pairs[i], v if (v := _to_number(pairs[i + 1])) is not None else pairs[i + 1])
            for i in range(0, len(pairs), 2)
        )
        return InitRef(fn, kwargs)
    if prefix not in ("S", "K"):
        raise ValueError(
            f"symbolic value {value!r}: unknown prefix {prefix!r}; expected 'S:', 'K:' or 'I:'"
        )
    base, div, mul = _split_factors(rest, value)
    if prefix == "K":
        return ConstRef(base, div, mul)
    head, sep, dim_text = base.rpartition(":")
    dim = _to_number(dim_text)
    if not isinstance(dim, int):
        raise ValueError(f"symbolic value {value!r}: dimension {dim_text!r} is not an int")
    if not sep:
        return ShapeRef(dim, 0, None, div, mul)
    index = _to_number(head)
    if isinstance(index, int):
        if index < 0:
            raise ValueError(f"symbolic value {value!r}: input index must be >= 0")
        return ShapeRef(dim, index, None, div, mul)
    return ShapeRef(dim, None, canonical_name(head), div, mul)


def as_int(value: Any) -> int | None:
    """`value` as an int when it is integral (an int, numpy int or integral float), else None;
    a bool is not a number here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    return None


def _apply_factors(number: int, div: int, mul: int, value: Any) -> int:
    if number % div:
        raise ValueError(f"symbolic value {value!r}: {div} is not a factor of {number}")
    return number // div * mul


def make_initializer(ref: InitRef) -> Callable:
    fn = getattr(initializers, ref.fn)
    if ref.fn in _NO_KWARG_INITS:
        return fn
    return fn(**dict(ref.kwargs))


def resolve(
    value: Any,
    input_shapes: Sequence[Sequence[int]],
    tensors: Mapping[str, Any],
    constants: Mapping[str, Any],
) -> Any:
    """Resolves a kwarg value. Lists become tuples; references become ints or initializers.

    `input_shapes` are the op's input shapes, `tensors` maps canonical names of earlier
    tensors to anything with a `.shape`, `constants` are the graph constants.
    """
    if isinstance(value, (list, tuple)):
        return tuple(resolve(v, input_shapes, tensors, constants) for v in value)
    if not isinstance(value, str):
        return value
    parsed = parse(value)
    if isinstance(parsed, InitRef):
        return make_initializer(parsed)
    if isinstance(parsed, ConstRef):
        if parsed.key not in constants:
            raise ValueError(f"symbolic value {value!r}: no graph constant named {parsed.key!r}")
        const = constants[parsed.key]
        if parsed.div == 1 and parsed.mul == 1:
            return const
        number = as_int(const)
        if number is None:
            raise ValueError(f"symbolic value {value!r}: graph constant {parsed.key!r} is "
                             f"{const!r}; factors need an int")
        return _apply_factors(number, parsed.div, parsed.mul, value)
    if isinstance(parsed, ShapeRef):
        if parsed.tensor is not None:
            if parsed.tensor not in tensors:
                raise ValueError(f"symbolic value {value!r}: no earlier tensor {parsed.tensor!r}")
            shape = tuple(tensors[parsed.tensor].shape)
        else:
            if parsed.input_index >= len(input_shapes):
                raise ValueError(
                    f"symbolic value {value!r}: op has only {len(input_shapes)} input(s)"
                )
            shape = tuple(input_shapes[parsed.input_index])
        if not -len(shape) <= parsed.dim < len(shape):
            raise ValueError(f"symbolic value {value!r}: dim {parsed.dim} out of range for {shape}")
        return _apply_factors(int(shape[parsed.dim]), parsed.div, parsed.mul, value)
    return parsed


def references(value: Any) -> list[Any]:
    """All parsed references inside a (possibly nested) kwarg value; parses, so it validates."""
    if isinstance(value, (list, tuple)):
        return [r for v in value for r in references(v)]
    if isinstance(value, str):
        parsed = parse(value)
        if isinstance(parsed, (ShapeRef, ConstRef, InitRef)):
            return [parsed]
    return []
