"""Host-side (numpy) versions of the flax initializers that synthesized ops use.

Why: a child's fresh parameters have new shapes, and every new shape given to a jax
initializer costs an XLA compile (0.3-1.2 s each on this machine), which would dominate the
time to propose a child. These draw from the same distributions as `flax.linen.initializers`
(variance scaling with the same fan rules, truncated normal on [-2, 2]) from a seeded numpy
generator, so they are deterministic per seed and cost no compile. Initializers without a
host version fall back to the jax one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nas.graph.ops import Op, OpType
from nas.graph.symbolic import InitRef, make_initializer, parse

HostInit = Callable[[np.random.Generator, tuple[int, ...], Any], np.ndarray]

# std of a standard normal truncated to [-2, 2], as flax/jax use it.
_TRUNC_STD = 0.87962566103423978

# name -> (scale, mode, distribution)
_VARIANCE_SCALING = {
    "lecun_normal": (1.0, "fan_in", "truncated_normal"),
    "lecun_uniform": (1.0, "fan_in", "uniform"),
    "glorot_normal": (1.0, "fan_avg", "truncated_normal"),
    "xavier_normal": (1.0, "fan_avg", "truncated_normal"),
    "glorot_uniform": (1.0, "fan_avg", "uniform"),
    "xavier_uniform": (1.0, "fan_avg", "uniform"),
    "he_normal": (2.0, "fan_in", "truncated_normal"),
    "kaiming_normal": (2.0, "fan_in", "truncated_normal"),
    "he_uniform": (2.0, "fan_in", "uniform"),
    "kaiming_uniform": (2.0, "fan_in", "uniform"),
}


def _fans(shape: tuple[int, ...]) -> tuple[float, float]:
    if len(shape) < 2:
        raise ValueError(f"variance scaling needs a kernel of rank >= 2, got shape {shape}")
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def _truncated(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal truncated to [-2, 2] by resampling the rejected entries.

    Each round tests only the entries just redrawn (about 5 % of the last), not the whole
    array: the same draws in the same order, at half the cost for a large kernel."""
    out = rng.standard_normal(shape)
    flat = out.reshape(-1)
    rejected = np.flatnonzero(np.abs(flat) > 2)
    while rejected.size:
        flat[rejected] = rng.standard_normal(rejected.size)
        rejected = rejected[np.abs(flat[rejected]) > 2]
    return out


def variance_scaling(scale: float, mode: str, distribution: str) -> HostInit:
    def init(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        fan_in, fan_out = _fans(shape)
        denominator = {"fan_in": fan_in, "fan_out": fan_out,
                       "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / denominator
        if distribution == "truncated_normal":
            values = _truncated(rng, shape) * np.sqrt(variance) / _TRUNC_STD
        elif distribution == "normal":
            values = rng.standard_normal(shape) * np.sqrt(variance)
        elif distribution == "uniform":
            values = rng.uniform(-1.0, 1.0, shape) * np.sqrt(3 * variance)
        else:
            raise ValueError(f"unknown variance scaling distribution {distribution!r}")
        return values.astype(dtype)

    return init


def _constant(value: float) -> HostInit:
    return lambda rng, shape, dtype: np.full(shape, value, dtype=dtype)


def host_initializer(name: str, kwargs: Mapping[str, Any]) -> HostInit | None:
    """The numpy version of flax initializer `name(**kwargs)`, or None if there is none."""
    if name in ("zeros", "zeros_init"):
        return _constant(0.0)
    if name in ("ones", "ones_init"):
        return _constant(1.0)
    if name == "constant":
        return _constant(float(kwargs.get("value", 0.0)))
    if name == "normal":
        std = float(kwargs.get("stddev", 1e-2))
        return lambda rng, shape, dtype: (rng.standard_normal(shape) * std).astype(dtype)
    if name == "truncated_normal" and set(kwargs) <= {"stddev"}:
        std = float(kwargs.get("stddev", 1e-2))
        return lambda rng, shape, dtype: (_truncated(rng, shape) * std).astype(dtype)
    if name == "uniform":
        scale = float(kwargs.get("scale", 1e-2))
        return lambda rng, shape, dtype: rng.uniform(0.0, scale, shape).astype(dtype)
    if name in _VARIANCE_SCALING and not kwargs:
        return variance_scaling(*_VARIANCE_SCALING[name])
    if name == "variance_scaling" and set(kwargs) <= {"scale", "mode", "distribution"}:
        return variance_scaling(float(kwargs.get("scale", 1.0)), str(kwargs.get("mode", "fan_in")),
                                str(kwargs.get("distribution", "truncated_normal")))
    return None


# Which op kwarg initializes which parameter leaf, and its flax default.
_LEAF_INITS: dict[str, tuple[str, str]] = {
    "kernel": ("kernel_init", "I:lecun_normal"),
    "bias": ("bias_init", "I:zeros"),
    "scale": ("scale_init", "I:ones"),
    "mean": ("", "I:zeros"),
    "var": ("", "I:ones"),
}
_HOST_TYPES = frozenset({OpType.DENSE, OpType.CONV, OpType.BATCH_NORM, OpType.LAYER_NORM,
                         OpType.GROUP_NORM, OpType.PARAM})


def leaf_init_spec(op: Op, leaf: str) -> Any:
    """The initializer (an `I:` string or a callable) of one parameter leaf of `op`."""
    if op.type is OpType.PARAM:
        return op.input_kwargs["init_fn"]
    key, default = _LEAF_INITS[leaf]
    return op.op_kwargs.get(key, default) if key else default


def seeded_generator(seed: int, *names: str) -> np.random.Generator:
    """A numpy generator keyed by a seed and names, stable across processes."""
    digest = hashlib.sha256("\x00".join([str(seed), *names]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def init_leaf(op: Op, leaf: str, shape: tuple[int, ...], dtype: Any, seed: int,
              collection: str) -> jax.Array:
    """A fresh value for one leaf of `op`'s variables, on the host when possible."""
    rng = seeded_generator(seed, collection, op.name, leaf)
    spec = leaf_init_spec(op, leaf) if (op.type in _HOST_TYPES and
                                        (op.type is OpType.PARAM or leaf in _LEAF_INITS)) else None
    if isinstance(spec, str):
        ref = parse(spec)
        if isinstance(ref, InitRef):
            host = host_initializer(ref.fn, dict(ref.kwargs))
            if host is not None:
                return jnp.asarray(host(rng, tuple(shape), np.dtype(dtype)))
            fn = make_initializer(ref)
        else:
            fn = None
    elif callable(spec):
        fn = spec
    else:
        fn = None
    if fn is None:
        raise LookupError(f"op {op.name!r}: no known initializer for leaf {leaf!r}")
    key = jax.random.PRNGKey(int(rng.integers(0, 2**31 - 1)))
    return fn(key, tuple(shape), dtype)
