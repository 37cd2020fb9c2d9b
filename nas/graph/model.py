"""`Model`: a flax.linen module that interprets a `Graph`.

All interpretation (kwarg resolution, dispatch, naming) happens while tracing, so a jitted
step of an IR model compiles to the same XLA program as the equivalent hand-written module.
Parameters are flat by op: `params["conv_layer0/conv"] = {"kernel", "bias"}`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from nas.graph import grouped_conv, pooling, stall
from nas.graph.ops import Graph, Op, OpType, canonical_name
from nas.graph.symbolic import resolve
from nas.graph.validate import INPUT_KWARG_DEFAULTS, MODULE_TYPES, check_const_kwarg

# Failures that say nothing about the graph (memory, the device, jax tracing misuse): they
# reach the caller unchanged, so that its own handling of them still works.
PASSTHROUGH_ERRORS: tuple[type[BaseException], ...] = (
    MemoryError, FloatingPointError, jax.errors.JaxRuntimeError,
    jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
    jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError,
    jax.errors.UnexpectedTracerError,
)


class OpError(ValueError):
    """An op failed while running. `reason` is the underlying message, so that a caller that
    runs an op in a model of its own (shape inference) can name the op of its graph."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from both arguments, so it crosses a process pool intact."""
        return type(self), (str(self), self.reason), self.__dict__


def failure_reason(error: Exception) -> str:
    """What went wrong, without the op: an OpError's own reason, else the error's text."""
    return error.reason if isinstance(error, OpError) else str(error) or type(error).__name__


def op_failure(op: Op, shapes: Sequence[Sequence[int]], error: Exception | str,
               what: str = "failed") -> OpError:
    """The ValueError reporting that running `op` raised `error` (or failed for the reason
    given as text): names the op, its type and its input shapes (jax and flax report such
    problems as TypeError, AssertionError, ...)."""
    reason = error if isinstance(error, str) else failure_reason(error)
    shapes = [tuple(s) for s in shapes]
    return OpError(f"op {op.name!r} ({op.type.name}) {what} on inputs {shapes}: {reason}",
                   reason)


def resolve_op(
    op: Op, input_values: Sequence[Any], tensors: Mapping[str, Any], constants: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Concrete (op_kwargs, input_kwargs) for one op; the op itself is left untouched."""
    shapes = [v.shape for v in input_values]

    def one(kwargs: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in kwargs.items():
            if key == "name":
                continue
            try:
                resolved = resolve(value, shapes, tensors, constants)
            except ValueError as e:
                raise ValueError(f"op {op.name!r} kwarg {key!r}: {e}") from None
            out[key] = check_const_kwarg(op, key, value, resolved)
        return out

    return one(op.op_kwargs), one(op.input_kwargs)


def _stochastic_depth(
    module: nn.Module, x: jax.Array, rate: float, deterministic: bool
) -> jax.Array:
    survival = 1.0 - float(rate)
    if deterministic or survival >= 1.0:
        return x
    rng = module.make_rng("dropout")
    keep = jax.random.bernoulli(rng, survival, (x.shape[0],) + (1,) * (x.ndim - 1))
    return jnp.where(keep, x / survival, jnp.zeros_like(x))


def spatial_rank(op_type: OpType, shape: Sequence[int], kw: Mapping[str, Any],
                 size_key: str) -> int:
    """How many spatial axes a conv kernel or pool window covers, as flax reads it: a
    sequence has one entry per spatial axis, and the input is (spatial..., features),
    unbatched, or (batch, spatial..., features); an int is expanded over rank - 2 axes (a
    batched input, as in the reference). Any other rank is refused: flax would take extra
    leading axes as batch axes, or fail with an assertion. Flat features (batch, features)
    have no spatial axis: a conv there is a (grouped) dense layer."""
    size = kw.get(size_key)
    shape = tuple(shape)
    if not isinstance(size, tuple | list):
        if len(shape) < 2:
            raise ValueError(f"{op_type.name} with an int {size_key} needs a batched input "
                             f"(batch, spatial..., features), got shape {shape}")
        return len(shape) - 2
    spatial = len(size)
    if len(shape) not in (spatial + 1, spatial + 2):
        raise ValueError(f"{op_type.name} {size_key} {tuple(size)} covers {spatial} spatial "
                         f"axes: the input needs rank {spatial + 1} (unbatched) or "
                         f"{spatial + 2} (batched), got shape {shape}")
    return spatial


def _check_spatial(op_type: OpType, x: jax.Array, kw: Mapping[str, Any], size_key: str,
                   keys: Sequence[str]) -> int:
    """`spatial_rank`, and every per-axis kwarg in `keys` has one entry per spatial axis."""
    spatial = spatial_rank(op_type, x.shape, kw, size_key)
    for key in keys:
        value = kw.get(key)
        if isinstance(value, tuple | list) and len(value) != spatial:
            raise ValueError(f"{op_type.name} {key} {tuple(value)} needs {spatial} entries, "
                             f"one per spatial axis of an input of shape {tuple(x.shape)}")
    return spatial


def _pool_args(x: jax.Array, spatial: int, kw: dict[str, Any]) -> dict[str, Any]:
    """Expands int windows/strides to one entry per spatial dim; a 0 window is global.
    `x` is batched: (batch, spatial..., features)."""
    window = kw["window_shape"]
    window = (window,) * spatial if isinstance(window, int) else tuple(window)
    window = tuple(x.shape[1 + i] if w == 0 else w for i, w in enumerate(window))
    out = {"window_shape": window}
    if "strides" in kw:
        strides = kw["strides"]
        out["strides"] = (strides,) * spatial if isinstance(strides, int) else tuple(strides)
    if "padding" in kw:
        out["padding"] = kw["padding"]
    return out


def _pool(op_type: OpType, x: jax.Array, kw: dict[str, Any]) -> jax.Array:
    """Average or max pooling; an unbatched input runs as a batch of one, as in flax."""
    spatial = _check_spatial(op_type, x, kw, "window_shape", ("strides",))
    padding = kw.get("padding")
    if padding is not None and not isinstance(padding, str) and len(padding) != spatial:
        raise ValueError(f"{op_type.name} padding {padding!r} needs one (low, high) pair "
                         f"per spatial axis ({spatial})")
    unbatched = x.ndim == spatial + 1
    batched = x[None] if unbatched else x
    pool = nn.avg_pool if op_type is OpType.AVG_POOL else pooling.max_pool
    y = pool(batched, **_pool_args(batched, spatial, kw))
    return y[0] if unbatched else y


def _concat(inputs: Sequence[jax.Array], axis: int) -> jax.Array:
    """`jnp.concatenate` after checking what it would report less clearly: one rank, an
    axis inside it, and equal sizes on every other axis."""
    shapes = [tuple(v.shape) for v in inputs]
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise ValueError(f"CONCAT needs inputs of one rank, got shapes {shapes}")
    if not -rank <= axis < rank:
        raise ValueError(f"CONCAT axis {axis} is outside inputs of rank {rank}")
    axis %= rank
    rest = {s[:axis] + s[axis + 1:] for s in shapes}
    if len(rest) != 1:
        raise ValueError(f"CONCAT along axis {axis} needs equal sizes on every other axis, "
                         f"got shapes {shapes}")
    return jnp.concatenate(list(inputs), axis=axis)


def _module_kwargs(op_type: OpType, x: jax.Array, kw: dict[str, Any]) -> dict[str, Any]:
    if op_type is OpType.CONV:
        spatial = _check_spatial(op_type, x, kw, "kernel_size",
                                 ("strides", "input_dilation", "kernel_dilation"))
        if isinstance(kw.get("kernel_size"), int):
            kw = {**kw, "kernel_size": (kw["kernel_size"],) * spatial}
        kw = {**kw, "conv_general_dilated": grouped_conv.conv_general_dilated}
    return kw


def exec_op(
    module: nn.Module,
    op: Op,
    inputs: Sequence[jax.Array],
    op_kw: dict[str, Any],
    in_kw: dict[str, Any],
    deterministic: bool,
    training: bool,
) -> list[jax.Array]:
    """Runs one op inside `module` (the Model's compact scope) and returns its outputs."""
    t = op.type
    x = inputs[0] if inputs else None
    checks_only = not module.is_mutable_collection("params")
    if t in MODULE_TYPES:
        kw = _module_kwargs(t, x, op_kw)
        if checks_only:
            kw = {**kw, **dict.fromkeys(_PARAM_INITS.get(t, ()), nn.initializers.zeros)}
        layer = MODULE_TYPES[t](name=op.name, **kw)
        if t is OpType.BATCH_NORM:
            in_kw.setdefault("use_running_average", not training)
            return [layer(x, **in_kw)]
        if t in (OpType.DROPOUT, OpType.SELF_ATTENTION):
            return [layer(x, deterministic=deterministic)]
        return [layer(x)]
    if t is OpType.NONE:
        return [lax.stop_gradient(x)]
    if t is OpType.IDENTITY:
        return [x]
    if t is OpType.ADD:
        x0 = _stochastic_depth(module, x, in_kw.get("layer_drop_rate", 0.0), deterministic)
        return [x0 + inputs[1]]
    if t is OpType.STOCH_DEPTH:
        return [_stochastic_depth(module, x, in_kw["layer_drop_rate"], deterministic)]
    if t is OpType.MUL:
        return [x * inputs[1]]
    if t is OpType.SCALAR_MUL:
        const = in_kw.get("const")
        return [x * (float(const) if const is not None else 1.0 / jnp.sqrt(x.shape[-1]))]
    if t is OpType.SCALAR_ADD:
        return [x + float(in_kw["const"])]
    if t is OpType.DOT_GENERAL:
        return [lax.dot_general(x, inputs[1], **in_kw)]
    if t is OpType.EINSUM:
        return [jnp.einsum(in_kw["sum"], x, inputs[1])]
    if t in INPUT_KWARG_DEFAULTS:
        in_kw = {**INPUT_KWARG_DEFAULTS[t], **in_kw}
    if t is OpType.CONCAT:
        return [_concat(inputs, in_kw["axis"])]
    if t in _ACTIVATIONS:
        return [_ACTIVATIONS[t](x, **in_kw)]
    if t is OpType.SOFTMAX:
        return [nn.softmax(x, **in_kw)]
    if t is OpType.RESHAPE:
        shape = tuple(x.shape[0] if s == "B" else s for s in in_kw["new_shape"])
        return [jnp.reshape(x, shape, **{k: v for k, v in in_kw.items() if k != "new_shape"})]
    if t is OpType.FLATTEN:
        return [jnp.reshape(x, (x.shape[0], -1))]
    if t is OpType.TRANSPOSE:
        return [jnp.transpose(x, axes=in_kw["axes"])]
    if t in (OpType.AVG_POOL, OpType.MAX_POOL):
        return [_pool(t, x, in_kw)]
    if t is OpType.MEAN:
        return [jnp.mean(x, axis=in_kw["axis"], keepdims=in_kw["keepdims"])]
    if t is OpType.PARAM:
        init = nn.initializers.zeros if checks_only else in_kw["init_fn"]
        return [module.param(op.name, init, tuple(in_kw["shape"]))]
    raise ValueError(f"op {op.name!r}: the interpreter has no rule for {t.name}")


# The initializers of each layer type's parameters. While the params cannot change (any
# apply), flax calls a layer's initializers only to check the shapes of the existing
# params, by tracing them (`jax.eval_shape`) on every trace of the model: zeros traces in a
# fraction of the time of the default truncated normal, with the same shapes checked.
_PARAM_INITS: dict[OpType, tuple[str, ...]] = {
    OpType.DENSE: ("kernel_init", "bias_init"),
    OpType.DENSE_GENERAL: ("kernel_init", "bias_init"),
    OpType.CONV: ("kernel_init", "bias_init"),
    OpType.BATCH_NORM: ("scale_init", "bias_init"),
    OpType.LAYER_NORM: ("scale_init", "bias_init"),
    OpType.GROUP_NORM: ("scale_init", "bias_init"),
}

# Elementwise activations; the op's input kwargs (GELU's `approximate`, LEAKY_RELU's
# `negative_slope`, ELU's `alpha`, absent ones at INPUT_KWARG_DEFAULTS) are passed on.
_ACTIVATIONS: dict[OpType, Callable[..., jax.Array]] = {
    OpType.RELU: nn.relu,
    OpType.GELU: nn.gelu,
    OpType.SWISH: nn.swish,
    OpType.SIGMOID: nn.sigmoid,
    OpType.RELU6: nn.relu6,
    OpType.TANH: jnp.tanh,
    OpType.HARD_SWISH: nn.hard_swish,
    OpType.LEAKY_RELU: nn.leaky_relu,
    OpType.ELU: nn.elu,
}


def _input_table(graph: Graph, inp: Any) -> dict[str, Any]:
    """Graph inputs keyed by canonical name, each an array (shape and dtype); a dict may
    carry extra known tensors."""
    if not isinstance(inp, Mapping):
        if len(graph.input_names) != 1:
            raise ValueError(
                f"graph has inputs {graph.input_names}: pass a dict keyed by input name"
            )
        table = {canonical_name(graph.input_names[0]): inp}
    else:
        table = {canonical_name(k): v for k, v in inp.items()}
    missing = [n for n in graph.input_names if canonical_name(n) not in table]
    if missing:
        raise ValueError(f"graph inputs {missing} are missing from the input dict")
    for name, value in table.items():
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise ValueError(f"graph input {name!r} must be an array, got "
                             f"{type(value).__name__}")
    return table


class Model(nn.Module):
    """Interprets `graph`; `constants` seed the value table for `K:` kwargs.

    Call with a tensor (single-input, single-output graphs return a tensor) or a dict of
    named inputs (returns a dict keyed by output name). A graph without output names returns
    every op's tensors, keyed `"name:idx"`.
    """

    graph: Graph
    constants: Mapping[str, Any] | None = None

    @nn.compact
    def __call__(
        self, inp: Any, deterministic: bool = True, training: bool = False
    ) -> Any:
        graph = self.graph
        constants = dict(self.constants or {})
        tensors = _input_table(graph, inp)
        fed = set(tensors)
        stalling = stall.stall_op() if training else None  # a test hook, see nas.graph.stall
        for op in graph.ops:
            try:
                inputs = [tensors[n] for n in op.input_names]
            except KeyError as e:
                raise ValueError(f"op {op.name!r}: input {e.args[0]!r} was not computed") from None
            op_kw, in_kw = resolve_op(op, inputs, tensors, constants)
            try:
                outputs = exec_op(self, op, inputs, op_kw, in_kw, deterministic, training)
            except PASSTHROUGH_ERRORS:
                raise
            except Exception as e:  # noqa: BLE001 - jax and flax raise many types
                raise op_failure(op, [v.shape for v in inputs], e) from e
            if len(outputs) != op.num_outputs:
                raise ValueError(f"op {op.name!r} produced {len(outputs)} outputs, "
                                 f"declared num_outputs={op.num_outputs}")
            if op.name == stalling:
                outputs = [stall.stalled(v) for v in outputs]
            tensors.update(zip(op.output_names, outputs, strict=True))
        if not graph.output_names:
            return {k: v for k, v in tensors.items() if k not in fed}
        missing = [n for n in graph.output_names if canonical_name(n) not in tensors]
        if missing:
            raise ValueError(f"graph outputs {missing} were not computed by any op")
        if not isinstance(inp, Mapping) and len(graph.output_names) == 1:
            return tensors[canonical_name(graph.output_names[0])]
        return {name: tensors[canonical_name(name)] for name in graph.output_names}
