"""Traced equations -> IR ops, weights -> variables.

Why this shape: each jaxpr value becomes a `Tensor` (an IR tensor name), a `Const` (a
weight or a folded constant, made a PARAM op where a tensor meets it), or a lazy `Bcast` /
`Sum` / `WindowSum` that waits for its consumer (jax writes `x * s[:, None]` as a broadcast
then a multiply, `jnp.mean` as a sum then a divide, `nn.avg_pool` as a window sum then a
divide; the IR has one op for each pair). Anything else is refused with one line naming
the primitive and the module path where it sits.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import jax.numpy as jnp
import numpy as np

from nas.graph import Op, OpType, new_op
from nas.interop import activations
from nas.interop.trace import Lit, Traced

INPUT = "input"
_UNSAFE = re.compile(r"[^A-Za-z0-9_./\-]")


@dataclasses.dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    batch_axis: int | None  # where the batch is, None for weights' tensors


@dataclasses.dataclass(frozen=True)
class Const:
    value: np.ndarray


@dataclasses.dataclass(frozen=True)
class Bcast:
    src: Any  # Tensor or Const
    shape: tuple[int, ...]
    dims: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Sum:
    src: Tensor
    axes: tuple[int, ...]
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class WindowSum:
    src: Tensor
    params: dict[str, Any]
    shape: tuple[int, ...]


class Unsupported(ValueError):
    """A piece of the model the IR cannot express."""


def op_type(name: str, where: str) -> OpType:
    """An op type by name; the IR of this checkout may lack the newer ones."""
    t = getattr(OpType, name, None)
    if t is None:
        raise Unsupported(f"{where}: the IR has no {name} op type")
    return t


class Translator:
    """Walks the equations once, appending ops and variables."""

    def __init__(self, traced: Traced, input_shape: tuple[int, ...], root: str) -> None:
        self.t = traced
        self.root = root
        self.batch = input_shape[0]
        self.ops: list[Op] = []
        self.params: dict[str, Any] = {}
        self.batch_stats: dict[str, Any] = {}
        self.names: set[str] = {INPUT}
        self.env: dict[int, Any] = {i: Const(v) for i, v in traced.consts.items()}
        self.env[traced.input_id] = Tensor(INPUT, input_shape, 0)
        # CONV / DENSE ops made from primitives, without a bias yet: tensor name -> op index.
        self.biasable: dict[str, int] = {}
        self.uses: dict[int, set[int]] = {}
        for j, e in enumerate(traced.eqns):
            for a in e.inputs:
                if isinstance(a, int):
                    self.uses.setdefault(a, set()).add(j)

    # -- naming and emitting -------------------------------------------------------------

    def scope(self, e: Any) -> str:
        parts: list[str] = []
        for p in str(e.scope).split("/"):
            if p and (not parts or parts[-1] != p):
                parts.append(p)
        if parts and parts[0] == self.root:
            parts = parts[1:]
        return "/".join(parts)

    def where(self, e: Any) -> str:
        via = f" (in {e.via})" if e.via else ""
        return f"{self.root}/{self.scope(e)}".rstrip("/") + via

    def unique(self, base: str) -> str:
        base = _UNSAFE.sub("_", base).strip("/") or "op"
        name, k = base, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def emit(self, base: str, type_: OpType, inputs: list[Tensor], shape: tuple[int, ...],
             batch_axis: int | None, input_kwargs: dict[str, Any] | None = None,
             op_kwargs: dict[str, Any] | None = None) -> Tensor:
        name = self.unique(base)
        self.ops.append(new_op(name, type_, [t.name for t in inputs], input_kwargs, op_kwargs))
        return Tensor(name, tuple(shape), batch_axis)

    def fn_name(self, e: Any, kind: str) -> str:
        s = self.scope(e)
        return f"{s}/{kind}" if s else kind

    # -- values ------------------------------------------------------------------------

    def value(self, a: Any) -> Any:
        return Const(np.asarray(a.value)) if isinstance(a, Lit) else self.env[a]

    def is_scalar(self, a: Any) -> bool:
        v = Const(np.asarray(a.value)) if isinstance(a, Lit) else self.env.get(a)
        return isinstance(v, Const) and v.value.size == 1

    def param(self, e: Any, value: np.ndarray) -> Tensor:
        """A weight used directly (layer scale, position embedding) as a PARAM op."""
        value = np.asarray(value, np.float32)
        t = self.emit(self.fn_name(e, "param"), OpType.PARAM, [], value.shape, None,
                      {"init_fn": "I:zeros", "shape": list(value.shape)})
        self.params[t.name] = value
        return t

    def tensor(self, e: Any, v: Any) -> Tensor:
        """`v` as an IR tensor (lazy values become their ops)."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, Const):
            return self.param(e, v.value)
        if isinstance(v, Sum):
            return self.scalar(e, self.mean(e, v), float(_count(v)), "mul")
        if isinstance(v, WindowSum):
            return self.scalar(e, self.avg_pool(e, v), float(np.prod(
                v.params["window_dimensions"])), "mul")
        if isinstance(v, Bcast):
            if int(np.prod(v.shape)) == int(np.prod(_shape(v.src))):
                return self.reshape(e, self.tensor(e, v.src), v.shape)
            raise Unsupported(f"{self.where(e)}: a broadcast to {list(v.shape)} that no "
                              f"elementwise op consumes has no IR op")
        raise Unsupported(f"{self.where(e)}: cannot use {type(v).__name__} as a tensor")

    # -- op builders ---------------------------------------------------------------------

    def scalar(self, e: Any, x: Tensor, c: float, how: str) -> Tensor:
        if how == "add":
            return self.emit(self.fn_name(e, "scalar_add"), OpType.SCALAR_ADD, [x], x.shape,
                             x.batch_axis, {"const": c})
        return self.emit(self.fn_name(e, "scalar_mul"), OpType.SCALAR_MUL, [x], x.shape,
                         x.batch_axis, {"const": c})

    def mean(self, e: Any, s: Sum) -> Tensor:
        axes = [a - len(s.src.shape) for a in s.axes]
        return self.emit(self.fn_name(e, "mean"), OpType.MEAN, [s.src], s.shape,
                         s.src.batch_axis, {"axis": axes})

    def avg_pool(self, e: Any, w: WindowSum) -> Tensor:
        return self.emit(self.fn_name(e, "avg_pool"), OpType.AVG_POOL, [w.src], w.shape,
                         w.src.batch_axis, _pool_kwargs(self, e, w.params))

    def reshape(self, e: Any, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        if x.batch_axis is None:
            return self.emit(self.fn_name(e, "reshape"), OpType.RESHAPE, [x], shape, None,
                             {"new_shape": list(shape)})
        if x.batch_axis != 0 or not shape or shape[0] != self.batch:
            raise Unsupported(f"{self.where(e)}: a reshape from {list(x.shape)} to "
                              f"{list(shape)} mixes the batch axis with others")
        if len(shape) == 2 and len(x.shape) > 2:
            return self.emit(self.fn_name(e, "flatten"), OpType.FLATTEN, [x], shape, 0)
        return self.emit(self.fn_name(e, "reshape"), OpType.RESHAPE, [x], shape, 0,
                         {"new_shape": ["B", *shape[1:]]})

    def aligned(self, e: Any, v: Any, rank: int) -> Any:
        """An operand of an elementwise op, un-broadcast: numpy broadcasting does the rest."""
        if not isinstance(v, Bcast):
            return v
        src_shape = _shape(v.src)
        full = [1] * rank
        for i, d in enumerate(v.dims):
            full[d] = src_shape[i]
        trimmed = list(full)
        while trimmed and trimmed[0] == 1 and (not isinstance(v.src, Tensor)
                                               or v.src.batch_axis is None):
            trimmed.pop(0)
        if isinstance(v.src, Const):
            return Const(v.src.value.reshape(trimmed))
        src = self.tensor(e, v.src)
        if list(src.shape) == trimmed:
            return src
        return self.reshape(e, src, tuple(full if src.batch_axis is not None else trimmed))


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(v.value.shape) if isinstance(v, Const) else tuple(v.shape)


def _count(s: Sum) -> int:
    return int(np.prod([s.src.shape[a] for a in s.axes]))


def _pool_kwargs(tr: Translator, e: Any, params: dict[str, Any]) -> dict[str, Any]:
    window = tuple(params["window_dimensions"])
    strides = tuple(params["window_strides"])
    pads = tuple(tuple(p) for p in params["padding"])
    if (window[0], window[-1], strides[0], strides[-1]) != (1, 1, 1, 1) or pads[0] != (0, 0) \
            or pads[-1] != (0, 0) or any(d != 1 for d in params["base_dilation"]) \
            or any(d != 1 for d in params["window_dilation"]):
        raise Unsupported(f"{tr.where(e)}: {e.name} with window {list(window)}, strides "
                          f"{list(strides)} is not a pooling over the spatial axes")
    kw: dict[str, Any] = {"window_shape": list(window[1:-1]), "strides": list(strides[1:-1])}
    if any(p != (0, 0) for p in pads[1:-1]):
        kw["padding"] = [list(p) for p in pads[1:-1]]
    return kw


def translate(tr: Translator) -> Tensor:
    """Translate every equation; returns the output tensor."""
    consumed: set[int] = set()
    eqns = tr.t.eqns
    outputs = set(tr.t.output_ids)
    for j, e in enumerate(eqns):
        if j in consumed:
            continue
        tensors = [a for a in e.inputs if isinstance(a, int)
                   and not isinstance(tr.env[a], Const)]
        if not tensors:
            _fold(tr, e)
            continue
        if len(tensors) == 1 and isinstance(tr.env[tensors[0]], Tensor):
            x = tr.env[tensors[0]]
            found = activations.match(eqns, j, tensors[0], x.shape, x.batch_axis,
                                      tr.is_scalar, tr.uses, outputs, tr.t.consts, Lit)
            if found is not None:
                act, members, y = found
                consumed.update(members)
                tr.env[y] = tr.emit(tr.fn_name(e, act.type_name.lower()),
                                    op_type(act.type_name, tr.where(e)), [x], x.shape,
                                    x.batch_axis, act.input_kwargs or None)
                continue
        outs = RULES.get(e.name, _refuse)(tr, e, [tr.value(a) for a in e.inputs])
        for o, v in zip(e.outputs, outs, strict=True):
            tr.env[o] = v
    (out,) = tr.t.output_ids
    return tr.tensor(eqns[-1] if eqns else None, tr.env[out])


def _fold(tr: Translator, e: Any) -> None:
    """Every input is constant: compute it now (a broadcast stays lazy, batch-free)."""
    if e.name == "broadcast_in_dim":
        (v,) = [tr.value(a) for a in e.inputs]
        tr.env[e.outputs[0]] = Bcast(v, tuple(e.params["shape"]),
                                     tuple(e.params["broadcast_dimensions"]))
        return
    args = []
    for a in e.inputs:
        v = tr.value(a)
        if isinstance(v, Bcast):
            v = Const(np.broadcast_to(v.src.value.reshape(
                [v.src.value.shape[v.dims.index(d)] if d in v.dims else 1
                 for d in range(len(v.shape))]), v.shape))
        args.append(jnp.asarray(v.value))
    out = e.primitive.bind(*args, **e.params)
    outs = out if e.primitive.multiple_results else [out]
    for o, v in zip(e.outputs, outs, strict=True):
        tr.env[o] = Const(np.asarray(v))


def _refuse(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    raise Unsupported(f"{tr.where(e)}: primitive {e.name!r} has no IR equivalent")


def _layer(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    call = tr.t.layers[e.params["index"]]
    x = tr.tensor(e, vals[0])
    name = tr.unique(call.path)
    tr.ops.append(new_op(name, call.op_type, [x.name], None, call.op_kwargs))
    tr.params[name] = dict(call.params)
    if call.batch_stats is not None:
        tr.batch_stats[name] = dict(call.batch_stats)
    return [Tensor(name, tuple(e.shapes[0]), x.batch_axis)]


def _binary(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    rank = len(e.shapes[0])
    kind = e.name
    first = vals[0]
    if isinstance(first, Bcast) and isinstance(first.src, Sum) and _is_scalar(vals[1]) \
            and _divides(kind, vals[1], first.src) \
            and int(np.prod(first.shape)) == int(np.prod(first.src.shape)):
        return [tr.reshape(e, tr.mean(e, first.src), first.shape)]  # mean(keepdims=True)
    a, b = (tr.aligned(e, v, rank) for v in vals)
    sa = isinstance(a, Const) and a.value.size == 1
    sb = isinstance(b, Const) and b.value.size == 1
    if isinstance(a, Sum | WindowSum) and sb and _divides(kind, b, a):
        return [tr.mean(e, a) if isinstance(a, Sum) else tr.avg_pool(e, a)]
    if sb and kind in ("add", "sub", "mul", "div") and not isinstance(a, Const):
        c = float(b.value.reshape(()))
        x = tr.tensor(e, a)
        c = {"add": c, "sub": -c, "mul": c, "div": 1.0 / c if c else math.inf}[kind]
        return [tr.scalar(e, x, c, "add" if kind in ("add", "sub") else "mul")]
    if sa and kind in ("add", "mul", "sub") and not isinstance(b, Const):
        c = float(a.value.reshape(()))
        x = tr.tensor(e, b)
        if kind == "sub":
            return [tr.scalar(e, tr.scalar(e, x, -1.0, "mul"), c, "add")]
        return [tr.scalar(e, x, c, kind)]
    if kind == "add":
        fused = _fuse_bias(tr, e, a, b)
        if fused is not None:
            return [fused]
    if kind not in ("add", "sub", "mul"):
        raise Unsupported(f"{tr.where(e)}: primitive {kind!r} (outside a known activation) "
                          f"has no IR equivalent")
    x, y = tr.tensor(e, a), tr.tensor(e, b)
    if kind == "sub":
        y = tr.scalar(e, y, -1.0, "mul")
    batch = 0 if 0 in (x.batch_axis, y.batch_axis) else x.batch_axis
    t = OpType.MUL if kind == "mul" else OpType.ADD
    return [tr.emit(tr.fn_name(e, t.name.lower()), t, [x, y], tuple(e.shapes[0]), batch)]


def _fuse_bias(tr: Translator, e: Any, a: Any, b: Any) -> Tensor | None:
    """`conv(x) + bias` or `x @ w + bias` (the bias over the features, the sum the matmul's
    only use) as the op's own bias: ConvTranspose and hand-written layers import whole."""
    for t, c, j in ((a, b, 0), (b, a, 1)):
        if not isinstance(t, Tensor) or t.name not in tr.biasable or not isinstance(c, Const):
            continue
        source = e.inputs[j]
        if not isinstance(source, int) or len(tr.uses.get(source, ())) != 1 \
                or source in tr.t.output_ids:
            continue
        index = tr.biasable[t.name]
        op = tr.ops[index]
        features = int(op.op_kwargs["features"])
        shape = list(c.value.shape)
        while shape and shape[0] == 1 and len(shape) > 1:
            shape.pop(0)
        if shape != [features]:
            continue
        kwargs = {k: v for k, v in op.op_kwargs.items() if k != "use_bias"}  # default True
        tr.ops[index] = new_op(op.name, op.type, op.input_names, op.input_kwargs, kwargs)
        tr.params[op.name]["bias"] = np.asarray(c.value, np.float32).reshape(features)
        del tr.biasable[t.name]
        return t
    return None


def _is_scalar(v: Any) -> bool:
    return isinstance(v, Const) and v.value.size == 1


def _divides(kind: str, c: Const, lazy: Any) -> bool:
    n = _count(lazy) if isinstance(lazy, Sum) else int(np.prod(
        lazy.params["window_dimensions"]))
    v = float(c.value.reshape(()))
    return (kind == "div" and math.isclose(v, n, rel_tol=1e-6)) or (
        kind == "mul" and math.isclose(v * n, 1.0, rel_tol=1e-6))


def _neg(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    return [tr.scalar(e, tr.tensor(e, vals[0]), -1.0, "mul")]


def _identity(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    if e.name == "convert_element_type" and np.dtype(e.params["new_dtype"]) != np.float32:
        raise Unsupported(f"{tr.where(e)}: a conversion to {np.dtype(e.params['new_dtype'])} "
                          f"has no IR equivalent (the IR computes in float32)")
    return [vals[0]]


def _stop_gradient(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    x = tr.tensor(e, vals[0])
    return [tr.emit(tr.fn_name(e, "stop_gradient"), OpType.NONE, [x], x.shape, x.batch_axis)]


def _broadcast(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    return [Bcast(vals[0], tuple(e.params["shape"]), tuple(e.params["broadcast_dimensions"]))]


def _reshape(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    if e.params.get("dimensions") is not None:
        raise Unsupported(f"{tr.where(e)}: a reshape with a dimension order has no IR op")
    return [tr.reshape(e, tr.tensor(e, vals[0]), tuple(e.shapes[0]))]


def _squeeze(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    return [tr.reshape(e, tr.tensor(e, vals[0]), tuple(e.shapes[0]))]


def _transpose(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    x = tr.tensor(e, vals[0])
    perm = [int(p) for p in e.params["permutation"]]
    batch = None if x.batch_axis is None else perm.index(x.batch_axis)
    return [tr.emit(tr.fn_name(e, "transpose"), OpType.TRANSPOSE, [x], tuple(e.shapes[0]),
                    batch, {"axes": perm})]


def _reduce_sum(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    x = tr.tensor(e, vals[0])
    axes = tuple(int(a) for a in e.params["axes"])
    if x.batch_axis in axes:
        raise Unsupported(f"{tr.where(e)}: a sum over the batch axis has no IR equivalent")
    batch = x.batch_axis
    if batch is not None:
        batch -= sum(a < batch for a in axes)
    return [Sum(x, axes, tuple(e.shapes[0]))] if batch in (0, None) else [
        tr.tensor(e, Sum(x, axes, tuple(e.shapes[0])))]


def _window(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    x = tr.tensor(e, vals[0])
    if e.name == "reduce_window_sum":
        _pool_kwargs(tr, e, e.params)
        return [WindowSum(x, dict(e.params), tuple(e.shapes[0]))]
    return [tr.emit(tr.fn_name(e, "max_pool"), OpType.MAX_POOL, [x], tuple(e.shapes[0]),
                    x.batch_axis, _pool_kwargs(tr, e, e.params))]


def _concatenate(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    xs = [tr.tensor(e, v) for v in vals]
    axis = int(e.params["dimension"])
    batch = next((x.batch_axis for x in xs if x.batch_axis is not None), None)
    if axis == batch:
        raise Unsupported(f"{tr.where(e)}: a concatenation along the batch axis has no IR op")
    return [tr.emit(tr.fn_name(e, "concat"), op_type("CONCAT", tr.where(e)), xs,
                    tuple(e.shapes[0]), batch, {"axis": axis - len(e.shapes[0])})]


def _dot_general(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    a, b = vals
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    if isinstance(b, Const) and not isinstance(a, Const) and b.value.ndim == 2 \
            and not lb and not rb:
        x = tr.tensor(e, a)
        if tuple(lc) == (len(x.shape) - 1,) and tuple(rc) == (0,):
            name = tr.unique(tr.fn_name(e, "dense"))
            tr.ops.append(new_op(name, OpType.DENSE, [x.name], None,
                                 {"features": int(b.value.shape[1]), "use_bias": False}))
            tr.params[name] = {"kernel": np.asarray(b.value, np.float32)}
            tr.biasable[name] = len(tr.ops) - 1
            return [Tensor(name, tuple(e.shapes[0]), x.batch_axis)]
    x, y = tr.tensor(e, a), tr.tensor(e, b)
    numbers = [[list(map(int, lc)), list(map(int, rc))], [list(map(int, lb)),
                                                         list(map(int, rb))]]
    batch = _dot_batch_axis(tr, e, x, y, numbers)
    return [tr.emit(tr.fn_name(e, "dot_general"), OpType.DOT_GENERAL, [x, y],
                    tuple(e.shapes[0]), batch, {"dimension_numbers": numbers})]


def _dot_batch_axis(tr: Translator, e: Any, x: Tensor, y: Tensor,
                    numbers: list[list[list[int]]]) -> int | None:
    """Where the batch lands in a dot_general's output (batch dims, then the left's free
    dims, then the right's); refused where examples would be summed or mixed."""
    (lc, rc), (lb, rb) = numbers
    lfree = [d for d in range(len(x.shape)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(y.shape)) if d not in rc and d not in rb]
    found = []
    for t, contract, batch_dims, free, offset in ((x, lc, lb, lfree, len(lb)),
                                                 (y, rc, rb, rfree, len(lb) + len(lfree))):
        if t.batch_axis is None:
            continue
        if t.batch_axis in contract:
            raise Unsupported(f"{tr.where(e)}: a dot_general summing over the batch axis has "
                              f"no IR equivalent")
        found.append(batch_dims.index(t.batch_axis) if t.batch_axis in batch_dims
                     else offset + free.index(t.batch_axis))
    if len(found) == 2 and found[0] != found[1]:
        raise Unsupported(f"{tr.where(e)}: a dot_general mixing the examples of a batch has "
                          f"no IR equivalent")
    return found[0] if found else None


def _conv(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
    a, k = vals
    p = e.params
    n = len(e.shapes[0])
    dn = p["dimension_numbers"]
    want = ((0, n - 1, *range(1, n - 1)), (n - 1, n - 2, *range(n - 2)),
            (0, n - 1, *range(1, n - 1)))
    if not isinstance(k, Const) or isinstance(a, Const) or p["batch_group_count"] != 1 \
            or (tuple(dn.lhs_spec), tuple(dn.rhs_spec), tuple(dn.out_spec)) != want:
        raise Unsupported(f"{tr.where(e)}: a convolution other than channels-last with a "
                          f"fixed kernel has no IR equivalent")
    x = tr.tensor(e, a)
    kernel = np.asarray(k.value, np.float32)
    kw = {"features": int(kernel.shape[-1]), "kernel_size": list(kernel.shape[:-2]),
          "strides": list(p["window_strides"]), "padding": [list(q) for q in p["padding"]],
          "input_dilation": list(p["lhs_dilation"]), "kernel_dilation":
          list(p["rhs_dilation"]), "feature_group_count": int(p["feature_group_count"]),
          "use_bias": False}
    name = tr.unique(tr.fn_name(e, "conv"))
    tr.ops.append(new_op(name, OpType.CONV, [x.name], None, kw))
    tr.params[name] = {"kernel": kernel}
    tr.biasable[name] = len(tr.ops) - 1
    return [Tensor(name, tuple(e.shapes[0]), x.batch_axis)]


def _single(type_name: str) -> Any:
    def rule(tr: Translator, e: Any, vals: list[Any]) -> list[Any]:
        x = tr.tensor(e, vals[0])
        return [tr.emit(tr.fn_name(e, type_name.lower()), op_type(type_name, tr.where(e)),
                        [x], x.shape, x.batch_axis)]
    return rule


RULES: dict[str, Any] = {
    "nas_layer": _layer,
    "add": _binary, "sub": _binary, "mul": _binary, "div": _binary, "max": _binary,
    "min": _binary,
    "neg": _neg,
    "convert_element_type": _identity, "copy": _identity, "copy_p": _identity,
    "optimization_barrier": _identity,
    "stop_gradient": _stop_gradient,
    "broadcast_in_dim": _broadcast,
    "reshape": _reshape, "squeeze": _squeeze, "expand_dims": _squeeze,
    "transpose": _transpose,
    "reduce_sum": _reduce_sum,
    "reduce_window_sum": _window, "reduce_window_max": _window,
    "concatenate": _concatenate,
    "dot_general": _dot_general,
    "conv_general_dilated": _conv,
    "tanh": _single("TANH"), "logistic": _single("SIGMOID"),
}
