"""Max pooling whose gradient is fast on XLA:CPU.

Why: the gradient of `reduce_window` max is XLA's `select_and_scatter`, which XLA:CPU runs
slowly (jax 0.10.2, 2 cores, batch 32, forward + backward, `benchmarks/pooling.py`: 4x4
windows at stride 1 on 32x32x64 140 ms, here 74 ms; 2x2 at stride 2 30 ms, here 6 ms).
Mutation proposes max pools often: in the README search a child with a new 4x4 max pool
took 10.1 s to train and 17 s to fit, here 7.3 s and 11.4 s (others 3-5 s and 1-6 s).
The forward pass here is the same `reduce_window` (same program, same FLOPs count);
the backward pass is the vector-Jacobian product of the separable form: a max over a
window is a max over each spatial axis in turn, each a running `maximum` of strided
slices of the input padded with -inf. It routes the gradient to the maximal inputs like
`select_and_scatter` does; where a window holds several equal maxima, it splits the
gradient among them (`select_and_scatter` gives it to one): both are subgradients.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax


def _pads(size: int, window: int, stride: int, padding: str | Sequence[int]
          ) -> tuple[int, int]:
    """(low, high) padding of one spatial axis, as `lax.reduce_window` pads it."""
    if isinstance(padding, str):
        return tuple(lax.padtype_to_pads((size,), (window,), (stride,), padding)[0])
    return int(padding[0]), int(padding[1])


def separable_max_pool(x: jax.Array, window: Sequence[int], strides: Sequence[int],
                       pads: Sequence[tuple[int, int]]) -> jax.Array:
    """Max pooling over axes 1..len(window) as running maxima of strided slices."""
    for axis, (w, s, (lo, hi)) in enumerate(zip(window, strides, pads, strict=True), 1):
        if lo or hi:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (lo, hi)
            x = jnp.pad(x, widths, constant_values=-jnp.inf)
        count = (x.shape[axis] - w) // s + 1
        span = (count - 1) * s + 1
        out = lax.slice_in_dim(x, 0, span, stride=s, axis=axis)
        for k in range(1, w):
            out = jnp.maximum(out, lax.slice_in_dim(x, k, k + span, stride=s, axis=axis))
        x = out
    return x


@functools.lru_cache(maxsize=256)
def _pool_fn(shape: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
             pads: tuple[tuple[int, int], ...]):
    """The custom-VJP max pool for one static configuration."""
    dims = (1, *window, *(1,) * (len(shape) - 1 - len(window)))
    steps = (1, *strides, *(1,) * (len(shape) - 1 - len(window)))
    full = ((0, 0), *pads, *((0, 0),) * (len(shape) - 1 - len(window)))

    @jax.custom_vjp
    def pool(x: jax.Array) -> jax.Array:
        return lax.reduce_window(x, -jnp.inf, lax.max, dims, steps, full)

    def forward(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return pool(x), x

    def backward(x: jax.Array, g: jax.Array) -> tuple[jax.Array]:
        _, vjp = jax.vjp(lambda v: separable_max_pool(v, window, strides, pads), x)
        return vjp(g)

    pool.defvjp(forward, backward)
    return pool


def max_pool(x: jax.Array, window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: str | Sequence[Sequence[int]] = "VALID") -> jax.Array:
    """`flax.linen.max_pool` for a batched input (batch, spatial..., features), with the
    fast gradient. `padding`: "SAME", "VALID" or one (low, high) pair per spatial axis."""
    window = tuple(int(w) for w in window_shape)
    strides = tuple(int(s) for s in strides) if strides is not None else (1,) * len(window)
    if len(strides) != len(window) or x.ndim < len(window) + 2:
        raise ValueError(f"max pool: window {window} and strides {strides} need one entry "
                         f"per spatial axis of an input of shape {x.shape}")
    per_axis = [padding] * len(window) if isinstance(padding, str) else list(padding)
    if len(per_axis) != len(window):
        raise ValueError(f"max pool: padding {padding!r} needs one (low, high) pair per "
                         f"spatial axis ({len(window)})")
    pads = tuple(_pads(x.shape[1 + i], w, s, p)
                 for i, (w, s, p) in enumerate(zip(window, strides, per_axis, strict=True)))
    return _pool_fn(tuple(x.shape), window, strides, pads)(x)
