"""FLOPs counted from the jaxpr: the same number on CPU, GPU and TPU, without compiling.

Why: the search ranks candidates by FLOPs and every MFU figure divides by them, so they must
not depend on where the search runs. XLA's `cost_analysis()` does (XLA:GPU does not count
convolutions that become cuDNN custom calls), and it needs a compiled executable. Here each
primitive of the traced function is counted from its shapes, with the rules of XLA's CPU
cost analysis, so the totals agree with what that analysis reported on CPU (within 1 % for
the zoo models, see tests/train/test_flops.py):

* a multiply-add counts 2: `dot_general` 2*M*N*K (times the batch dimensions); a
  convolution 2 * (Cin / groups) * Cout * batch per kernel tap that lands on a real input
  element: the zero taps that SAME padding (or input dilation) adds are not counted;
* an elementwise arithmetic op (add, mul, max, compare, select, ...) counts 1 per output
  element; `logistic` counts 3 (XLA:CPU computes it as 1 / (1 + exp(-x))); other
  transcendental ops (exp, log, tanh, logistic, rsqrt, sqrt, erf, pow, ...) count
  0, as XLA reports them separately;
* a reduction counts 1 per input element folded into an output (inputs - outputs);
  `reduce_window` (pooling) counts (window - 1) per output element;
* data movement (reshape, broadcast, transpose, slice, convert, concatenate, ...) counts 0;
* calls (`jit`, `custom_jvp_call`, `custom_vjp_call`, `remat`) count their body; `scan`
  its body times its length; `cond` its most expensive branch; `while` its body once (its
  trip count is not known from shapes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

# Counted 0: XLA reports them as "transcendentals", not flops.
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "expm1", "log", "log1p", "tanh", "tan", "sin", "cos", "atan2",
    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "rsqrt", "sqrt", "cbrt",
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "pow",
})

# Counted 1 per output element.
ELEMENTWISE = frozenset({
    "add", "add_any", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "sign",
    "floor", "ceil", "round", "square", "select_n", "eq", "ne", "lt", "le", "gt", "ge",
    "and", "or", "not", "xor", "clamp", "nextafter", "is_finite", "exp2_int",
    "shift_left", "shift_right_logical", "shift_right_arithmetic", "integer_pow_1",
})

_REDUCE = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
                     "reduce_or", "argmax", "argmin"})
_REDUCE_WINDOW = frozenset({"reduce_window_sum", "reduce_window_max", "reduce_window_min",
                            "reduce_window"})


def _size(aval: Any) -> int:
    return int(math.prod(getattr(aval, "shape", ())))


def _valid_taps(n_in: int, n_out: int, k: int, stride: int, pad_lo: int, lhs_dil: int,
                rhs_dil: int) -> int:
    """How many (output position, kernel tap) pairs of one spatial axis read a real input
    element (not padding, not a hole of input dilation)."""
    dilated_in = (n_in - 1) * lhs_dil + 1 if n_in else 0
    total = 0
    for o in range(n_out):
        for t in range(k):
            pos = o * stride + t * rhs_dil - pad_lo
            if 0 <= pos < dilated_in and pos % lhs_dil == 0:
                total += 1
    return total


def _conv(eqn: Any) -> int:
    lhs, rhs = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    batch = lhs.shape[lhs_spec[0]] // p.get("batch_group_count", 1)
    cin = lhs.shape[lhs_spec[1]] // p.get("feature_group_count", 1)
    cout = rhs.shape[rhs_spec[0]]
    ndim = len(lhs_spec) - 2
    strides = p["window_strides"]
    lhs_dil = p.get("lhs_dilation") or (1,) * ndim
    rhs_dil = p.get("rhs_dilation") or (1,) * ndim
    taps = 1
    for d in range(ndim):
        taps *= _valid_taps(lhs.shape[lhs_spec[2 + d]], out.shape[out_spec[2 + d]],
                            rhs.shape[rhs_spec[2 + d]], strides[d], p["padding"][d][0],
                            lhs_dil[d], rhs_dil[d])
    return 2 * batch * cin * cout * taps


def _dot(eqn: Any) -> int:
    lhs, rhs = (v.aval for v in eqn.invars)
    (_, rhs_contract), (_, rhs_batch) = eqn.params["dimension_numbers"]
    rhs_free = [d for i, d in enumerate(rhs.shape) if i not in rhs_contract and i not in rhs_batch]
    return 2 * _size(lhs) * int(math.prod(rhs_free))


def _reduce_window(eqn: Any) -> int:
    window = int(math.prod(eqn.params["window_dimensions"]))
    return _size(eqn.outvars[0].aval) * max(window - 1, 0)


def _sub_jaxprs(eqn: Any) -> list[Any]:
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, jcore.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, jcore.Jaxpr):
                found.append(item)
    return found


def count_jaxpr(jaxpr: Any) -> int:
    """FLOPs of one (open or closed) jaxpr under the rules in the module docstring."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "conv_general_dilated":
            total += _conv(eqn)
        elif name == "dot_general":
            total += _dot(eqn)
        elif name in ELEMENTWISE:
            total += _size(eqn.outvars[0].aval)
        elif name == "logistic":  # XLA:CPU expands it to 1 / (1 + exp(-x)): 3 flops
            total += 3 * _size(eqn.outvars[0].aval)
        elif name == "integer_pow":  # x**n: n - 1 multiplies (x**2 is one)
            total += _size(eqn.outvars[0].aval) * max(abs(int(eqn.params["y"])) - 1, 1)
        elif name in _REDUCE:
            total += max(_size(eqn.invars[0].aval) - _size(eqn.outvars[0].aval), 0)
        elif name in _REDUCE_WINDOW:
            total += _reduce_window(eqn)
        elif name == "scan":
            total += int(eqn.params["length"]) * count_jaxpr(eqn.params["jaxpr"])
        elif name == "cond":
            total += max((count_jaxpr(b) for b in eqn.params["branches"]), default=0)
        elif name == "while":
            total += count_jaxpr(eqn.params["body_jaxpr"]) + count_jaxpr(eqn.params["cond_jaxpr"])
        else:  # calls (jit, custom_jvp_call, ...) count their bodies; data movement counts 0
            total += sum(count_jaxpr(j) for j in _sub_jaxprs(eqn))
    return total


def abstract(tree: Any) -> Any:
    """ShapeDtypeStructs for a tree of arrays (concrete or already abstract)."""
    def one(x: Any) -> jax.ShapeDtypeStruct:
        dtype = x.dtype if hasattr(x, "dtype") else np.result_type(x)
        return jax.ShapeDtypeStruct(np.shape(x), dtype)

    return jax.tree.map(one, tree)


def count(fn: Callable[..., Any], *args: Any) -> int:
    """FLOPs of `fn(*args)` (args concrete or abstract); traced only, never compiled."""
    return count_jaxpr(jax.make_jaxpr(fn)(*abstract(args)))


def forward_flops(apply_fn: Callable[..., Any], variables: Any,
                  example_shape: Sequence[int], dtype: Any = np.float32) -> int:
    """Forward FLOPs of `apply_fn(variables, x)` on one example of `example_shape`."""
    x = jax.ShapeDtypeStruct((1, *example_shape), dtype)
    return count(apply_fn, variables, x)


def xla_cpu_count(fn: Callable[..., Any], *args: Any) -> int:
    """XLA:CPU's cost-analysis FLOPs of `fn(*args)`, compiled for the CPU explicitly (whatever
    the default backend): the reference the counter above is checked against."""
    cpu = jax.sharding.SingleDeviceSharding(jax.local_devices(backend="cpu")[0])
    placed = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=cpu),
                          abstract(args))
    cost = jax.jit(fn).lower(*placed).compile().cost_analysis()
    if isinstance(cost, Sequence) and not isinstance(cost, dict):  # older jax: a list
        cost = cost[0] if cost else {}
    return int(round(float((cost or {}).get("flops", 0.0))))
