"""One line of `flax.linen` code per IR op: the expression that computes exactly what the
interpreter (`nas.graph.model.exec_op`) computes for it, from kwargs already resolved.

Why a rule per op type rather than one generic call: the exported module must run without
`nas`, so every rule writes the flax/jax call the interpreter makes, with its arguments as
Python literals. Module layers keep the op's name as the flax name, so the exported
variables are the candidate's variables, unrenamed. Anything without a rule is refused.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.graph import symbolic
from nas.graph.model import spatial_rank
from nas.graph.ops import Op, OpType
from nas.graph.validate import INPUT_KWARG_DEFAULTS, MODULE_TYPES

# Helpers the generated file must define (embedded from nas' own sources by `flax_code`).
STOCH_DEPTH = "_stochastic_depth"
MAX_POOL = "max_pool"
GROUPED_CONV = "conv_general_dilated"


@dataclass
class OpCode:
    """What a rule needs: the op, its resolved kwargs, its inputs as Python expressions and
    their shapes; `helpers` collects the helper functions the line calls."""

    op: Op
    op_kw: dict[str, Any]
    in_kw: dict[str, Any]
    args: list[str]
    shapes: list[tuple[int, ...]]
    helpers: set[str] = field(default_factory=set)
    # The module flax functions and initializers are written from: linen's `nn`, or `nnx`
    # (which re-exports the same functions), so that NNX code imports no linen.
    ns: str = "nn"

    def lit(self, key: str, value: Any) -> str:
        return literal(value, f"op {self.op.name!r} kwarg {key!r}", self.ns)

    def fn(self, name: str) -> str:
        """`nn.relu` as this code's namespace writes it (`nnx.relu`); `jnp.` names as they are."""
        return f"{self.ns}.{name[3:]}" if name.startswith("nn.") else name


def literal(value: Any, where: str, ns: str = "nn") -> str:
    """`value` as Python source; initializer strings (`"I:..."`) as flax initializer calls.
    A value with no literal form (an object from a `K:` constant) is refused, named."""
    if isinstance(value, str):
        parsed = symbolic.parse(value) if ":" in value else None
        if isinstance(parsed, symbolic.InitRef):
            return initializer(parsed, ns)
        return repr(value)
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, numbers.Integral):
        return repr(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        return repr(number) if math.isfinite(number) else f'float("{number}")'
    if isinstance(value, tuple | list):
        items = [literal(v, where, ns) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{literal(k, where, ns)}: {literal(v, where, ns)}"
                               for k, v in value.items()) + "}"
    raise ValueError(f"{where}: a {type(value).__name__} value cannot be written as Python "
                     f"code: {value!r}"[:300])


def initializer(ref: symbolic.InitRef, ns: str = "nn") -> str:
    """`nn.initializers.normal(stddev=1e-06)` for `I:normal:stddev:1e-6` (as
    `symbolic.make_initializer` builds it)."""
    if ref.fn in ("zeros", "ones"):
        return f"{ns}.initializers.{ref.fn}"
    args = ", ".join(f"{k}={literal(v, 'initializer ' + ref.fn, ns)}" for k, v in ref.kwargs)
    return f"{ns}.initializers.{ref.fn}({args})"


def _call_args(code: OpCode, kwargs: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """`key=value` for every kwarg, in the order the op wrote them."""
    keys = [k for k in order if k in kwargs] + sorted(k for k in kwargs if k not in order)
    return [f"{k}={code.lit(k, kwargs[k])}" for k in keys]


def _module(code: OpCode) -> str:
    t, x = code.op.type, code.args[0]
    kw = dict(code.op_kw)
    if t is OpType.CONV and isinstance(kw.get("kernel_size"), int):
        spatial = spatial_rank(t, code.shapes[0], kw, "kernel_size")
        kw["kernel_size"] = (kw["kernel_size"],) * spatial
    args = _call_args(code, kw, list(code.op.op_kwargs))
    if t is OpType.CONV and int(kw.get("feature_group_count", 1)) > 1:
        code.helpers.add(GROUPED_CONV)
        args.append(f"conv_general_dilated={GROUPED_CONV}")
    layer = f"nn.{MODULE_TYPES[t].__name__}({', '.join([*args, f'name={code.op.name!r}'])})"
    if t is OpType.BATCH_NORM:
        running = ("not train" if "use_running_average" not in code.in_kw
                   else code.lit("use_running_average", code.in_kw["use_running_average"]))
        return f"{layer}({x}, use_running_average={running})"
    if t in (OpType.DROPOUT, OpType.SELF_ATTENTION):
        return f"{layer}({x}, deterministic=not train)"
    return f"{layer}({x})"


def _stochastic_depth(code: OpCode, x: str) -> str:
    """The interpreter draws (and so advances the dropout rng) only for a rate above 0."""
    rate = code.in_kw.get("layer_drop_rate", 0.0)
    if 1.0 - float(rate) >= 1.0:
        return x
    code.helpers.add(STOCH_DEPTH)
    return f"{STOCH_DEPTH}(self, {x}, {code.lit('layer_drop_rate', rate)}, not train)"


def _pool(code: OpCode) -> str:
    """`_pool` of the interpreter: windows of 0 span their axis, an unbatched input runs
    as a batch of one."""
    t, x, shape = code.op.type, code.args[0], code.shapes[0]
    kw = code.in_kw
    spatial = spatial_rank(t, shape, kw, "window_shape")
    unbatched = len(shape) == spatial + 1
    batched = (1, *shape) if unbatched else tuple(shape)
    window = kw["window_shape"]
    window = (window,) * spatial if isinstance(window, int) else tuple(window)
    args = {"window_shape": tuple(batched[1 + i] if w == 0 else w for i, w in enumerate(window))}
    if "strides" in kw:
        strides = kw["strides"]
        args["strides"] = (strides,) * spatial if isinstance(strides, int) else tuple(strides)
    if "padding" in kw:
        args["padding"] = kw["padding"]
    if t is OpType.MAX_POOL:
        code.helpers.add(MAX_POOL)
        fn = MAX_POOL
    else:
        fn = code.fn("nn.avg_pool")
    call = f"{fn}({x}[None]" if unbatched else f"{fn}({x}"
    call += "".join(f", {k}={code.lit(k, v)}" for k, v in args.items()) + ")"
    return call + "[0]" if unbatched else call


def _reshape(code: OpCode) -> str:
    x = code.args[0]
    shape = [f"{x}.shape[0]" if s == "B" else code.lit("new_shape", s)
             for s in code.in_kw["new_shape"]]
    shape_text = f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(shape)})"
    rest = [f", {k}={code.lit(k, v)}" for k, v in code.in_kw.items() if k != "new_shape"]
    return f"jnp.reshape({x}, {shape_text}{''.join(rest)})"


def _scalar_mul(code: OpCode) -> str:
    x, const = code.args[0], code.in_kw.get("const")
    if const is None:
        return f"{x} * (1.0 / jnp.sqrt({x}.shape[-1]))"
    return f"{x} * {code.lit('const', float(const))}"


def _kw_call(fn: str) -> Callable[[OpCode], str]:
    """`fn(inputs..., **input_kwargs)`."""
    def rule(code: OpCode) -> str:
        kw = _call_args(code, code.in_kw, list(code.op.input_kwargs))
        return f"{code.fn(fn)}({', '.join([*code.args, *kw])})"
    return rule


def _activation(fn: str) -> Callable[[OpCode], str]:
    """`fn(x, **kwargs)` with absent kwargs at their IR defaults, as the interpreter passes
    them (GELU's `approximate`, LEAKY_RELU's `negative_slope`, ELU's `alpha`)."""
    def rule(code: OpCode) -> str:
        kw = {**INPUT_KWARG_DEFAULTS.get(code.op.type, {}), **code.in_kw}
        return f"{code.fn(fn)}({', '.join([code.args[0], *_call_args(code, kw, list(kw))])})"
    return rule


def _concat(code: OpCode) -> str:
    kw = {**INPUT_KWARG_DEFAULTS[OpType.CONCAT], **code.in_kw}
    return f"jnp.concatenate([{', '.join(code.args)}], axis={code.lit('axis', kw['axis'])})"


def _mean(code: OpCode) -> str:
    kw = {**INPUT_KWARG_DEFAULTS.get(OpType.MEAN, {}), **code.in_kw}
    keep = f", keepdims={code.lit('keepdims', kw['keepdims'])}" if kw.get("keepdims") else ""
    return f"jnp.mean({code.args[0]}, axis={code.lit('axis', kw['axis'])}{keep})"


_RULES: dict[OpType, Callable[[OpCode], str]] = {
    OpType.NONE: lambda c: f"lax.stop_gradient({c.args[0]})",
    OpType.IDENTITY: lambda c: c.args[0],
    OpType.ADD: lambda c: f"{_stochastic_depth(c, c.args[0])} + {c.args[1]}",
    OpType.STOCH_DEPTH: lambda c: _stochastic_depth(c, c.args[0]),
    OpType.MUL: lambda c: f"{c.args[0]} * {c.args[1]}",
    OpType.SCALAR_MUL: _scalar_mul,
    OpType.SCALAR_ADD: lambda c: f"{c.args[0]} + {c.lit('const', float(c.in_kw['const']))}",
    OpType.DOT_GENERAL: _kw_call("lax.dot_general"),
    OpType.EINSUM: lambda c: f"jnp.einsum({c.lit('sum', c.in_kw['sum'])}, {c.args[0]}, "
                             f"{c.args[1]})",
    OpType.CONCAT: _concat,
    OpType.RELU: _activation("nn.relu"),
    OpType.GELU: _activation("nn.gelu"),
    OpType.SWISH: _activation("nn.swish"),
    OpType.SIGMOID: _activation("nn.sigmoid"),
    OpType.RELU6: _activation("nn.relu6"),
    OpType.TANH: _activation("jnp.tanh"),
    OpType.HARD_SWISH: _activation("nn.hard_swish"),
    OpType.LEAKY_RELU: _activation("nn.leaky_relu"),
    OpType.ELU: _activation("nn.elu"),
    OpType.SOFTMAX: _kw_call("nn.softmax"),
    OpType.RESHAPE: _reshape,
    OpType.FLATTEN: lambda c: f"jnp.reshape({c.args[0]}, ({c.args[0]}.shape[0], -1))",
    OpType.TRANSPOSE: lambda c: f"jnp.transpose({c.args[0]}, "
                                f"axes={c.lit('axes', c.in_kw['axes'])})",
    OpType.AVG_POOL: _pool,
    OpType.MAX_POOL: _pool,
    OpType.MEAN: _mean,
    OpType.PARAM: lambda c: f"self.param({c.op.name!r}, {c.lit('init_fn', c.in_kw['init_fn'])}, "
                            f"{c.lit('shape', tuple(c.in_kw['shape']))})",
}
for _type in MODULE_TYPES:
    _RULES[_type] = _module


def op_expression(code: OpCode) -> str:
    """The right-hand side of the op's line; ValueError naming the op when its type has no
    rule."""
    rule = _RULES.get(code.op.type)
    if rule is None:
        raise ValueError(f"op {code.op.name!r}: {code.op.type.name} cannot be exported as "
                         f"Flax code (no rule for that op type)")
    return rule(code)
