"""Recognise activation functions in a jaxpr by what they compute, not how they are written.

Why: `nn.gelu`, `jax.nn.softmax` or a user's `x * jax.nn.sigmoid(x)` reach the jaxpr as
several primitives (and differ between jax versions). Any piece of the jaxpr that depends on
one tensor only (scalars aside), keeps its shape and whose intermediate values are used
nowhere else is a function of that tensor: evaluating it on probe values and comparing with
each activation the IR knows identifies it, with its parameters (a leaky relu's slope, an
elu's alpha, a softmax's axis). Evaluation runs the primitives on a probe array only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from scipy import special

# Primitives that may start an activation: anything else is translated on its own.
STARTS = frozenset({
    "max", "min", "mul", "add", "sub", "div", "neg", "integer_pow", "pow", "tanh",
    "logistic", "exp", "erf", "erfc", "abs", "sign", "select_n", "ge", "gt", "lt", "le",
    "clamp", "reduce_max", "sqrt", "rsqrt", "log", "log1p", "expm1", "square",
    "convert_element_type", "copy", "stop_gradient",
})
WINDOW = 48  # equations looked at after the start: activations are a few primitives


@dataclasses.dataclass(frozen=True)
class Activation:
    """The IR op type name and its input kwargs."""

    type_name: str
    input_kwargs: dict[str, Any]


def _gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + special.erf(x / np.sqrt(2)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


_FIXED: list[tuple[str, dict[str, Any], Callable[[np.ndarray], np.ndarray]]] = [
    ("RELU", {}, lambda x: np.maximum(x, 0)),
    ("RELU6", {}, lambda x: np.clip(x, 0, 6)),
    ("GELU", {}, lambda x: _gelu(x, True)),
    ("GELU", {"approximate": False}, lambda x: _gelu(x, False)),
    ("SWISH", {}, lambda x: x * _sigmoid(x)),
    ("HARD_SWISH", {}, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("SIGMOID", {}, _sigmoid),
    ("TANH", {}, np.tanh),
]


# Far-out points first: a function that agrees with relu on [-7, 7] but clips at 10 must
# not pass for relu.
_CORNERS = [1000.0, -1000.0, 100.0, -100.0, 20.0, -20.0, -7.0, -3.0, -1.0, -0.5, 0.5, 1.0,
            3.0, 7.0]


def probe(shape: Sequence[int]) -> np.ndarray:
    """Values from -7 to 7 (so relu6 and hard swish show their corners) and a few far out,
    in a fixed order."""
    n = int(np.prod(shape))
    values = np.random.default_rng(0).uniform(-7.0, 7.0, n)
    k = min(n, len(_CORNERS))
    values[:k] = _CORNERS[:k]
    return values.reshape(shape).astype(np.float32)


def identify(x: np.ndarray, y: np.ndarray, batch_axis: int | None) -> Activation | None:
    """The activation that maps `x` to `y`, or None."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _identify(x.astype(np.float64), y.astype(np.float64), batch_axis)


def _identify(x64: np.ndarray, y64: np.ndarray, batch_axis: int | None) -> Activation | None:
    if not np.all(np.isfinite(y64)):
        return None

    def close(want: np.ndarray) -> bool:
        return bool(np.allclose(y64, want, rtol=1e-4, atol=1e-5))

    for name, kwargs, fn in _FIXED:
        if close(fn(x64)):
            return Activation(name, dict(kwargs))
    neg = x64 < -0.1
    if neg.any():
        slope = float(np.median(y64[neg] / x64[neg]))
        if 0 < slope < 1 and close(np.where(x64 >= 0, x64, slope * x64)):
            return Activation("LEAKY_RELU", {"negative_slope": round(slope, 7)})
        alpha = float(np.median(y64[neg] / np.expm1(x64[neg])))
        if alpha > 0 and close(np.where(x64 > 0, x64, alpha * np.expm1(x64))):
            return Activation("ELU", {"alpha": round(alpha, 7)})
    for axis in range(x64.ndim):
        if axis == batch_axis or x64.shape[axis] < 2:
            continue
        e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
        if close(e / e.sum(axis=axis, keepdims=True)):
            return Activation("SOFTMAX", {"axis": axis - x64.ndim})
    return None


def _bcast(x: np.ndarray, shape: Sequence[int], broadcast_dimensions: Sequence[int],
           **_: Any) -> np.ndarray:
    full = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        full[d] = x.shape[i]
    return np.broadcast_to(x.reshape(full), tuple(shape))


# Numpy versions of the primitives activations are made of: probing in numpy costs
# microseconds, where each eager jax primitive compiles on first use (0.1 s and more).
NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "max": lambda a, b, **_: np.maximum(a, b), "min": lambda a, b, **_: np.minimum(a, b),
    "mul": lambda a, b, **_: a * b, "add": lambda a, b, **_: a + b,
    "sub": lambda a, b, **_: a - b, "div": lambda a, b, **_: a / b,
    "neg": lambda a, **_: -a, "integer_pow": lambda a, y, **_: a ** y,
    "pow": lambda a, b, **_: np.power(a, b), "square": lambda a, **_: a * a,
    "tanh": lambda a, **_: np.tanh(a), "logistic": lambda a, **_: _sigmoid(a),
    "exp": lambda a, **_: np.exp(a), "log": lambda a, **_: np.log(a),
    "log1p": lambda a, **_: np.log1p(a), "expm1": lambda a, **_: np.expm1(a),
    "erf": lambda a, **_: special.erf(a), "erfc": lambda a, **_: special.erfc(a),
    "sqrt": lambda a, **_: np.sqrt(a), "rsqrt": lambda a, **_: 1 / np.sqrt(a),
    "abs": lambda a, **_: np.abs(a), "sign": lambda a, **_: np.sign(a),
    "ge": lambda a, b, **_: a >= b, "gt": lambda a, b, **_: a > b,
    "le": lambda a, b, **_: a <= b, "lt": lambda a, b, **_: a < b,
    "clamp": lambda lo, a, hi, **_: np.clip(a, lo, hi),
    "select_n": lambda c, *cases, **_: np.choose(np.asarray(c, np.int64), cases),
    "convert_element_type": lambda a, new_dtype, **_: np.asarray(a, new_dtype),
    "copy": lambda a, **_: a, "stop_gradient": lambda a, **_: a,
    "reduce_max": lambda a, axes, **_: np.max(a, axis=tuple(axes)),
    "reduce_sum": lambda a, axes, **_: np.sum(a, axis=tuple(axes)),
    "broadcast_in_dim": _bcast,
}


def evaluate(eqns: Sequence[Any], inputs: dict[int, Any], consts: dict[int, Any],
             literal: type) -> dict[int, Any]:
    """Run `eqns` on concrete values (value id -> array): in numpy where it can, else by
    binding the jax primitive eagerly."""
    values = dict(inputs)
    for e in eqns:
        args = [np.asarray(a.value) if isinstance(a, literal)
                else values[a] if a in values else np.asarray(consts[a]) for a in e.inputs]
        rule = NUMPY.get(e.name)
        if rule is not None:
            outs = [np.asarray(rule(*args, **e.params))]
        else:
            out = e.primitive.bind(*map(jnp.asarray, args), **e.params)
            outs = [np.asarray(o) for o in (out if e.primitive.multiple_results else [out])]
        values.update(zip(e.outputs, outs, strict=True))
    return values


def match(eqns: Sequence[Any], start: int, x: int, x_shape: tuple[int, ...],
          batch_axis: int | None, is_scalar: Callable[[Any], bool],
          uses: dict[int, set[int]], outputs: set[int], consts: dict[int, Any],
          literal: type) -> tuple[Activation, list[int], int] | None:
    """(activation, indices of its equations, its output value) for the largest activation
    of `x` that starts at `eqns[start]`, or None."""
    if eqns[start].name not in STARTS:
        return None
    closure: list[int] = []
    known = {x}
    scalars: set[int] = set()  # computed from scalars only
    for j in range(start, min(len(eqns), start + WINDOW)):
        e = eqns[j]
        if e.name == "nas_layer":
            continue
        if not all(a in known or a in scalars or is_scalar(a) for a in e.inputs):
            continue
        if any(a in known for a in e.inputs):
            closure.append(j)
            known.update(e.outputs)
        elif j > start:  # a constant: a converted slope, a broadcast scalar
            closure.append(j)
            scalars.update(e.outputs)
    if not closure or closure[0] != start:
        return None
    producer = {o: j for j in closure for o in eqns[j].outputs}
    for j in reversed(closure):
        e = eqns[j]
        if len(e.outputs) != 1 or e.shapes[0] != tuple(x_shape):
            continue
        members = _slice(eqns, producer, e.outputs[0])
        if start not in members or not _contained(eqns, members, e.outputs[0], uses,
                                                  outputs):
            continue
        order = sorted(members)
        xs = probe(x_shape)
        try:
            with np.errstate(over="ignore", under="ignore", invalid="ignore",
                             divide="ignore"):
                values = evaluate([eqns[k] for k in order], {x: xs}, consts, literal)
        except Exception:  # noqa: BLE001 - a piece that does not run alone is no activation
            continue
        found = identify(xs, np.asarray(values[e.outputs[0]]), batch_axis)
        if found is not None:
            return found, order, e.outputs[0]
    return None


def _slice(eqns: Sequence[Any], producer: dict[int, int], y: int) -> set[int]:
    members: set[int] = set()
    todo = [y]
    while todo:
        v = todo.pop()
        j = producer.get(v)
        if j is None or j in members:
            continue
        members.add(j)
        todo.extend(a for a in eqns[j].inputs if isinstance(a, int))
    return members


def _contained(eqns: Sequence[Any], members: set[int], y: int, uses: dict[int, set[int]],
               outputs: set[int]) -> bool:
    """No value computed inside, but `y`, is used outside."""
    for j in members:
        for v in eqns[j].outputs:
            if v != y and (v in outputs or not uses.get(v, set()) <= members):
                return False
    return True
