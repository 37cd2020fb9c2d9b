"""The Flax layers imported whole: each becomes one IR op with its settings and weights.

Why whole: a Conv, Dense or BatchNorm traced into primitives would lose its identity (a
mutation could not replace it as a layer, and a batch norm would no longer train with batch
statistics). The IR runs these op types as the `flax.linen` modules themselves
(`nas.graph.validate.MODULE_TYPES`), so carrying the module's fields (those that differ from
linen's defaults) and its variables keeps its behaviour in inference and in training.

Einsum layers become DENSE_GENERAL where they are one (`nas.interop.einsum`). A layer with
no IR op of its own is either traced through into primitives where those express it
(ConvTranspose: a convolution with input dilation, its bias fused by the translator; an
Einsum or NNX LinearGeneral that is no DenseGeneral, a layer given its own matmul or
convolution function), or refused in one line naming it
(Embed: a gather at integer indices, which the IR, computing on float tensors, lacks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from nas.graph import OpType
from nas.interop import einsum

# Per op type: the linen fields carried (NNX layers are read into the same fields).
FIELDS: dict[OpType, tuple[str, ...]] = {
    OpType.DENSE: ("features", "use_bias"),
    OpType.DENSE_GENERAL: ("features", "axis", "batch_dims", "use_bias"),
    OpType.CONV: ("features", "kernel_size", "strides", "padding", "input_dilation",
                  "kernel_dilation", "feature_group_count", "use_bias"),
    OpType.BATCH_NORM: ("axis", "momentum", "epsilon", "use_bias", "use_scale",
                        "use_fast_variance"),
    OpType.LAYER_NORM: ("epsilon", "use_bias", "use_scale", "reduction_axes",
                        "feature_axes", "use_fast_variance"),
    OpType.GROUP_NORM: ("num_groups", "group_size", "epsilon", "use_bias", "use_scale",
                        "use_fast_variance"),
    OpType.DROPOUT: ("rate", "broadcast_dims"),
}


@dataclasses.dataclass
class LayerCall:
    """One call of a known layer while tracing: its input, and the IR op it becomes."""

    path: str
    kind: str  # the Flax class name, for messages
    module_id: int
    x: Any
    op_type: OpType
    op_kwargs: dict[str, Any]
    params: dict[str, np.ndarray]
    batch_stats: dict[str, np.ndarray] | None
    out_shape: tuple[int, ...] = ()


def is_linen(model: Any) -> bool:
    import flax.linen as nn

    return isinstance(model, nn.Module)


EMBED = ("an embedding lookup (a gather at integer indices) has no IR op: the IR computes "
         "on float tensors, with no gather or one-hot op")


def _linen_types() -> dict[type, OpType]:
    import flax.linen as nn

    return {nn.Dense: OpType.DENSE, nn.DenseGeneral: OpType.DENSE_GENERAL,
            nn.Einsum: OpType.DENSE_GENERAL,
            nn.Conv: OpType.CONV, nn.BatchNorm: OpType.BATCH_NORM,
            nn.LayerNorm: OpType.LAYER_NORM, nn.GroupNorm: OpType.GROUP_NORM,
            nn.Dropout: OpType.DROPOUT}


def _nnx_types() -> dict[type, OpType]:
    from flax import nnx

    return {nnx.Linear: OpType.DENSE, nnx.LinearGeneral: OpType.DENSE_GENERAL,
            nnx.Einsum: OpType.DENSE_GENERAL, nnx.Conv: OpType.CONV,
            nnx.BatchNorm: OpType.BATCH_NORM, nnx.LayerNorm: OpType.LAYER_NORM,
            nnx.GroupNorm: OpType.GROUP_NORM, nnx.Dropout: OpType.DROPOUT}


def _linen_others() -> dict[type, str]:
    """Layers with no IR op: the reason a call is refused, or "" to trace it through."""
    import flax.linen as nn

    return {nn.Embed: EMBED, nn.ConvTranspose: ""}


def _nnx_others() -> dict[type, str]:
    from flax import nnx

    return {nnx.Embed: EMBED, nnx.ConvTranspose: ""}


def known_linen(module: Any) -> bool:
    """Exactly a known class: a subclass may compute something else in its `__call__`."""
    return type(module) in _linen_types() or type(module) in _linen_others()


def nnx_classes() -> list[type]:
    return [*_nnx_types(), *_nnx_others()]


def _defaults(op_type: OpType) -> dict[str, Any]:
    from nas.graph.validate import MODULE_TYPES

    return {f.name: f.default for f in dataclasses.fields(MODULE_TYPES[op_type])
            if f.default is not dataclasses.MISSING}


def _plain(value: Any) -> Any:
    """Tuples as lists (the IR's JSON form), numpy scalars as Python numbers."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _op_kwargs(op_type: OpType, values: Mapping[str, Any]) -> dict[str, Any]:
    defaults = _defaults(op_type)
    out = {}
    for key in FIELDS[op_type]:
        if key not in values:
            continue
        value = values[key]
        if key in defaults and _plain(value) == _plain(defaults[key]):
            continue
        out[key] = _plain(value)
    return out


def _input(path: str, kind: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    if args:
        return args[0]
    for key in ("inputs", "x"):
        if key in kwargs:
            return kwargs[key]
    raise ValueError(f"layer {path} ({kind}): called without an input array")


def _arrays(tree: Mapping[str, Any] | None, path: str, kind: str) -> dict[str, np.ndarray]:
    """A layer's stored arrays. One computed from other parameters while the model runs
    (a wrapper such as `nn.WeightNorm` or `nn.SpectralNorm` rewrites the kernel) is no
    stored weight the IR could carry: refused, naming the layer."""
    for key, value in (tree or {}).items():
        if isinstance(value, jax.core.Tracer):
            raise ValueError(f"layer {path} ({kind}): its {key!r} is computed from other "
                             f"parameters while the model runs (a wrapper such as "
                             f"WeightNorm or SpectralNorm); the IR holds stored weights "
                             f"only: fold the computed {key!r} into a plain {kind} first")
    return {k: np.asarray(v) for k, v in (tree or {}).items()}


def _traced_through(layer: Any, path: str, kind: str, others: Mapping[type, str]) -> bool:
    """Whether a call of `layer` is traced through into primitives rather than imported as
    one op: a layer with no IR op of its own (`others`: its class -> the reason it is
    refused, "" where primitives express it), or one given its own matmul or convolution
    (`_injected`)."""
    if type(layer) in others:
        if others[type(layer)]:
            raise ValueError(f"layer {path} ({kind}): {others[type(layer)]}")
        if getattr(layer, "padding", None) == "CIRCULAR":
            raise ValueError(f"layer {path} ({kind}): circular padding has no IR op")
        return True
    return _injected(layer)


def _einsum_call(path: str, kind: str, module_id: int, x: Any, spec: str,
                 params: dict[str, np.ndarray]) -> LayerCall | None:
    """An Einsum layer as DENSE_GENERAL, or None (traced through) where it is none."""
    found = einsum.as_dense_general(spec, x.ndim, params["kernel"], params.get("bias"))
    if found is None:
        return None
    values = {"features": found.features, "axis": found.axis, "use_bias": found.bias is not None}
    weights = {"kernel": found.kernel, **({"bias": found.bias} if found.bias is not None
                                          else {})}
    return LayerCall(path, kind, module_id, x, OpType.DENSE_GENERAL,
                     _op_kwargs(OpType.DENSE_GENERAL, values), weights, None)


def _spec(args: tuple, kwargs: Mapping[str, Any], default: str | None) -> str:
    """An Einsum's equation: the call's (second argument or keyword) over the layer's."""
    given = args[1] if len(args) > 1 else kwargs.get("einsum_str")
    return given or default or ""


def _injected(layer: Any) -> bool:
    """Whether the layer was given its own matmul or convolution function (quantization
    libraries do): the IR op would compute the plain one, so such a call is traced through
    and what the function computes is imported (or refused)."""
    defaults = (None, jax.lax.dot_general, jax.lax.conv_general_dilated)
    return any(getattr(layer, f, None) not in defaults for f in (
        "dot_general", "dot_general_cls", "conv_general_dilated", "conv_general_dilated_cls"))


def linen_call(module: Any, args: tuple, kwargs: Mapping[str, Any]) -> LayerCall | None:
    """The IR op for a call of a known linen layer (its variables are already bound), None
    for one traced through into primitives."""
    path = "/".join(module.path) or type(module).__name__
    kind = f"flax.linen.{type(module).__name__}"
    if _traced_through(module, path, kind, _linen_others()):
        return None
    op_type = _linen_types()[type(module)]
    if type(module).__name__ == "Einsum":
        return _einsum_call(path, kind, id(module.scope), _input(path, kind, args, kwargs),
                            _spec(args, kwargs, module.einsum_str),
                            _arrays(module.variables.get("params"), path, kind))
    if op_type is OpType.CONV and module.mask is not None:
        raise ValueError(f"layer {path} ({kind}): a masked convolution has no IR op")
    values = {f: getattr(module, f) for f in FIELDS[op_type] if hasattr(module, f)}
    variables = module.variables
    stats = variables.get("batch_stats")
    return LayerCall(path, kind, id(module.scope), _input(path, kind, args, kwargs), op_type,
                     _op_kwargs(op_type, values), _arrays(variables.get("params"), path, kind),
                     _arrays(stats, path, kind) if op_type is OpType.BATCH_NORM else None)


def _value(var: Any) -> np.ndarray:
    return np.asarray(var.get_value() if hasattr(var, "get_value") else var)


def _nnx_general(layer: Any, path: str, kind: str, args: tuple, kwargs: Mapping[str, Any]
                 ) -> LayerCall | None:
    """NNX LinearGeneral (without batch axes) or Einsum as DENSE_GENERAL, else None."""
    x = _input(path, kind, args, kwargs)
    params = {k: _value(getattr(layer, k)) for k in ("kernel", "bias")
              if getattr(layer, k, None) is not None}
    if type(layer).__name__ == "Einsum":
        return _einsum_call(path, kind, id(layer), x, _spec(args, kwargs, layer.einsum_str),
                            params)
    if layer.batch_axis:
        return None
    values = {"features": layer.out_features, "axis": layer.axis,
              "use_bias": layer.use_bias}
    return LayerCall(path, kind, id(layer), x, OpType.DENSE_GENERAL,
                     _op_kwargs(OpType.DENSE_GENERAL, values), params, None)


def nnx_call(layer: Any, path: str, args: tuple, kwargs: Mapping[str, Any]
             ) -> LayerCall | None:
    """The IR op for a call of a known NNX layer, read from the layer's own state; None for
    one traced through into primitives."""
    kind = f"flax.nnx.{type(layer).__name__}"
    if _traced_through(layer, path, kind, _nnx_others()):
        return None
    op_type = _nnx_types()[type(layer)]
    if op_type is OpType.DENSE_GENERAL:
        return _nnx_general(layer, path, kind, args, kwargs)
    values = {f: getattr(layer, f) for f in FIELDS[op_type] if hasattr(layer, f)}
    if op_type in (OpType.DENSE, OpType.CONV):
        values["features"] = layer.out_features
    if op_type is OpType.CONV and layer.mask is not None:
        raise ValueError(f"layer {path} ({kind}): a masked convolution has no IR op")
    if op_type is OpType.GROUP_NORM:
        values["group_size"] = None
    if op_type is OpType.BATCH_NORM and kwargs.get("use_running_average",
                                                  layer.use_running_average) is False:
        raise ValueError(f"layer {path} ({kind}) runs in training mode (batch statistics); "
                         f"call model.eval() before importing")
    if op_type is OpType.DROPOUT and not kwargs.get("deterministic", layer.deterministic) \
            and layer.rate > 0:
        raise ValueError(f"layer {path} ({kind}) drops at random (training mode); call "
                         f"model.eval() before importing")
    params = {k: _value(getattr(layer, k)) for k in ("kernel", "bias", "scale")
              if getattr(layer, k, None) is not None}
    stats = ({"mean": _value(layer.mean), "var": _value(layer.var)}
             if op_type is OpType.BATCH_NORM else None)
    return LayerCall(path, kind, id(layer), _input(path, kind, args, kwargs), op_type,
                     _op_kwargs(op_type, values), params, stats)
