"""A grouped convolution whose kernel gradient is fast on every backend.

Why: XLA:CPU computes the kernel gradient of a grouped convolution (`feature_group_count`
> 1) through a convolution with `batch_group_count` that it runs 100-1000x slower than the
dense one (measured on jax 0.10.2: 2.1 s against 14 ms for 64->128 channels, 5x5, 16
groups, batch 32 at 16x16; 12 s for 128->64 in 64 groups at 8x8). Mutation proposes grouped
convolutions often, so one such child could hold a search for an hour. Here the forward pass
is the same `lax.conv_general_dilated` (same program, same FLOPs count); the input gradient
is its usual transpose; the kernel gradient is one batched matmul per kernel tap over the
strided slice of the padded input that the tap reads. Without spatial dims (a CONV on
flattened features) the whole convolution is a batched matmul over the groups. On CPU, a
convolution of up to `PER_GROUP_MAX_GROUPS` groups runs instead as one dense convolution per
group (`lax.platform_dependent`: other backends keep their own grouped kernels), which
XLA:CPU runs several times faster in both directions.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def channels_last(ndim: int) -> lax.ConvDimensionNumbers:
    """Flax's layout: batch first, features last, kernel (spatial..., in, out)."""
    spatial = tuple(range(1, ndim - 1))
    kernel = (ndim - 1, ndim - 2, *range(ndim - 2))
    return lax.ConvDimensionNumbers((0, ndim - 1, *spatial), kernel, (0, ndim - 1, *spatial))


def conv_general_dilated(lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int],
                         padding: Any, lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: Any = None, feature_group_count: int = 1,
                         precision: Any = None, **kwargs: Any) -> jax.Array:
    """`lax.conv_general_dilated` with the fast kernel gradient for grouped, channels-last
    convolutions without input dilation; anything else is passed to lax unchanged."""
    ndim = lhs.ndim
    plain = (feature_group_count == 1 or kwargs
             or any(d != 1 for d in (lhs_dilation or ()))
             or lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
             != channels_last(ndim))
    if plain:
        return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation,
                                        rhs_dilation, dimension_numbers, feature_group_count,
                                        precision=precision, **kwargs)
    spatial = ndim - 2
    if not spatial:
        return _grouped_matmul(lhs, rhs, feature_group_count, precision)
    dilation = tuple(rhs_dilation or (1,) * spatial)
    if isinstance(padding, str):
        dilated = [(k - 1) * d + 1 for k, d in zip(rhs.shape[:spatial], dilation, strict=True)]
        padding = lax.padtype_to_pads(lhs.shape[1:-1], dilated, window_strides, padding)
    strides, pads = tuple(window_strides), tuple(map(tuple, padding))
    conv = _grouped(strides, pads, dilation, feature_group_count, precision)
    if feature_group_count > PER_GROUP_MAX_GROUPS:
        return conv(lhs, rhs)
    per_group = functools.partial(_per_group, strides=strides, pads=pads, dilation=dilation,
                                  groups=feature_group_count, precision=precision)
    return lax.platform_dependent(lhs, rhs, cpu=per_group, default=conv)


# XLA:CPU runs a grouped convolution 1.5-7x slower forward, and 2-7x slower forward and
# backward, than the dense convolutions of its groups (jax 0.10.2, batch 32, 2-32 groups;
# benchmarks/grouped_conv.py). Each group is one more convolution to compile: at 32 groups
# the compile took 2 s longer, at 96 (depthwise) 8 s longer and ran no faster.
PER_GROUP_MAX_GROUPS = 16


def _per_group(lhs: jax.Array, rhs: jax.Array, *, strides: tuple[int, ...],
               pads: tuple[tuple[int, int], ...], dilation: tuple[int, ...], groups: int,
               precision: Any) -> jax.Array:
    """The grouped convolution as one dense convolution per group on its channel slices
    (the CPU branch: same FLOPs; other backends run their own grouped kernels)."""
    numbers = channels_last(lhs.ndim)
    outs = [lax.conv_general_dilated(x, k, strides, pads, None, dilation, numbers,
                                     precision=precision)
            for x, k in zip(jnp.split(lhs, groups, axis=-1), jnp.split(rhs, groups, axis=-1),
                            strict=True)]
    return jnp.concatenate(outs, axis=-1)


def _grouped_matmul(lhs: jax.Array, rhs: jax.Array, groups: int, precision: Any) -> jax.Array:
    """A grouped convolution without spatial dims (on flattened features) as one batched
    matmul over the groups.

    Why: XLA:CPU runs that convolution through its generic path: 2.5 s forward and 10 s
    gradient for 8,192 -> 16,384 features in 4 groups at batch 32, against 0.1 s and 0.24 s
    here; a search spent 20 minutes fitting one such child. Same FLOPs count (dot_general
    2*M*N*K per group) and the same values."""
    batch, cin = lhs.shape
    cout = rhs.shape[-1]
    out = jnp.einsum("bgi,igo->bgo", lhs.reshape(batch, groups, cin // groups),
                     rhs.reshape(cin // groups, groups, cout // groups), precision=precision)
    return out.reshape(batch, cout)


@functools.cache
def _grouped(strides: tuple[int, ...], pads: tuple[tuple[int, int], ...],
             dilation: tuple[int, ...], groups: int, precision: Any) -> Any:
    """The custom-VJP grouped convolution for one static configuration."""
    def forward(lhs: jax.Array, rhs: jax.Array) -> jax.Array:
        return lax.conv_general_dilated(lhs, rhs, strides, pads, None, dilation,
                                        channels_last(lhs.ndim), groups, precision=precision)

    @jax.custom_vjp
    def conv(lhs: jax.Array, rhs: jax.Array) -> jax.Array:
        return forward(lhs, rhs)

    def fwd(lhs: jax.Array, rhs: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        return forward(lhs, rhs), (lhs, rhs)

    def bwd(res: tuple[jax.Array, jax.Array], dy: jax.Array) -> tuple[jax.Array, jax.Array]:
        lhs, rhs = res
        _, input_vjp = jax.vjp(lambda x: forward(x, rhs), lhs)
        kernel = _kernel_grad(lhs, dy, rhs.shape, rhs.dtype, strides, pads, dilation, groups,
                              precision)
        return input_vjp(dy)[0], kernel

    conv.defvjp(fwd, bwd)
    return conv


def _kernel_grad(lhs: jax.Array, dy: jax.Array, kernel_shape: tuple[int, ...], dtype: Any,
                 strides: tuple[int, ...], pads: tuple[tuple[int, int], ...],
                 dilation: tuple[int, ...], groups: int, precision: Any) -> jax.Array:
    """d(loss)/d(kernel): for each tap, the input elements it read (a strided slice of the
    padded input) contracted with the output gradient over batch and positions, per group."""
    spatial = len(strides)
    taps, (cin_g, cout) = kernel_shape[:spatial], kernel_shape[spatial:]
    out_sizes = dy.shape[1:-1]
    padded = jnp.pad(lhs, ((0, 0), *pads, (0, 0)))
    pos = string.ascii_lowercase[:spatial]
    spec = f"n{pos}gc,n{pos}go->cgo"
    grads = dy.reshape(*dy.shape[:-1], groups, cout // groups)
    rows = []
    for tap in np.ndindex(*taps):
        start = [0] + [t * d for t, d in zip(tap, dilation, strict=True)] + [0]
        limit = ([lhs.shape[0]]
                 + [s + (o - 1) * st + 1 for s, o, st in zip(start[1:-1], out_sizes, strides,
                                                             strict=True)]
                 + [lhs.shape[-1]])
        read = lax.slice(padded, start, limit, (1, *strides, 1))
        read = read.reshape(*read.shape[:-1], groups, cin_g)
        rows.append(jnp.einsum(spec, read, grads, precision=precision).reshape(cin_g, cout))
    return jnp.stack(rows).reshape(kernel_shape).astype(dtype)

