"""A batch norm whose choice of statistics is a traced flag, not a Python bool.

Why: a trainer evaluates a network with its running averages and recomputes those averages
for its final weights ("precise BN": nas.train.precise_bn) with the batches' own statistics.
With flax's static `use_running_average` these are two compiled programs per network; with
the choice made at run time they are one, so a search child compiles one program fewer.

`Model` takes this path when its `training` argument is an array (a traced boolean); a
plain bool keeps flax's `nn.BatchNorm` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

# The collection each EitherBatchNorm sows its batch's statistics into: {op name: {"mean":
# (mean,), "var": (var,)}}; apply the model with mutable=[COLLECTION] to read them.
COLLECTION = "batch_statistics"


def _axes(ndim: int, axis: Any) -> tuple[int, ...]:
    axis = axis if isinstance(axis, tuple | list) else (axis,)
    return tuple(sorted(a % ndim for a in axis))


def moments(layer: nn.BatchNorm, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(mean, variance) of `x` over every axis but the layer's feature axes, as flax's batch
    norm computes them in training mode: in float32 at least, E[x^2] - E[x]^2 clipped at 0
    (or E[(x - E[x])^2] without `use_fast_variance`), averaged over the layer's `axis_name`."""
    features = _axes(x.ndim, layer.axis)
    reduce = tuple(i for i in range(x.ndim) if i not in features)
    dtype = jnp.promote_types(layer.dtype or x.dtype, jnp.float32)
    x = x.astype(dtype)
    mean = x.mean(reduce)
    if layer.use_fast_variance:
        square = (x * x).mean(reduce)
        if layer.axis_name is not None:
            mean, square = lax.pmean((mean, square), layer.axis_name,
                                     axis_index_groups=layer.axis_index_groups)
        return mean, jnp.maximum(0.0, square - mean * mean)
    if layer.axis_name is not None:
        mean = lax.pmean(mean, layer.axis_name, axis_index_groups=layer.axis_index_groups)
    var = jnp.square(x - jnp.expand_dims(mean, reduce)).mean(reduce)
    if layer.axis_name is not None:
        var = lax.pmean(var, layer.axis_name, axis_index_groups=layer.axis_index_groups)
    return mean, var


def _normalized(layer: nn.BatchNorm, x: jax.Array, mean: jax.Array, var: jax.Array,
                like: jax.Array) -> jax.Array:
    """`x` normalized with (mean, var) and the layer's scale and bias, in flax's order of
    operations, in the dtype of `like` (flax's output)."""
    features = _axes(x.ndim, layer.axis)
    reduce = tuple(i for i in range(x.ndim) if i not in features)
    shape = [x.shape[i] if i in features else 1 for i in range(x.ndim)]
    params = layer.variables.get("params", {})
    y = x - jnp.expand_dims(mean, reduce)
    mul = lax.rsqrt(jnp.expand_dims(var, reduce) + layer.epsilon)
    if layer.use_scale:
        mul = mul * params["scale"].reshape(shape)
    y = y * mul
    if layer.use_bias:
        y = y + params["bias"].reshape(shape)
    return y.astype(like.dtype)


class EitherBatchNorm(nn.BatchNorm):
    """`nn.BatchNorm` (same variables) normalizing with the batch's statistics where
    `use_batch` is true and with the running averages otherwise (exactly flax's output
    then). The batch's statistics are sown into COLLECTION either way, as {"mean", "var"};
    the running averages never move."""

    @nn.compact
    def __call__(self, x: jax.Array, use_batch: jax.Array) -> jax.Array:  # type: ignore[override]
        running = super().__call__(x, use_running_average=True)
        mean, var = moments(self, x)
        if not self.is_initializing():
            self.sow(COLLECTION, "mean", mean)
            self.sow(COLLECTION, "var", var)
        return jnp.where(use_batch, _normalized(self, x, mean, var, running), running)


def sown_statistics(sown: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{op name: {"mean", "var"}} from the variables a model applied with mutable=[COLLECTION]
    returned."""
    return {name: {k: v[0] for k, v in stats.items()}
            for name, stats in sown.get(COLLECTION, {}).items()}
