"""Does the grouped convolution's kernel gradient still cost more than the convolution?

For grouped convolutions of the shapes mutation proposes on CifarNet (batch 32), times the
jitted gradient (input and kernel) of `lax.conv_general_dilated` against
`nas.graph.grouped_conv`, and against its per-tap kernel gradient alone (what other
backends run; on CPU up to 16 groups run as dense convolutions per group), alternating them
in rounds so machine noise hits all alike, and prints the speedup plus the dense
convolution of the same shape for scale.

    python benchmarks/grouped_conv.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from nas.graph import grouped_conv

SHAPES = [  # cin, cout, kernel, stride, groups, spatial size (0: flattened features)
    (64, 128, 3, 1, 2, 32),  # seen in the README search (there with dilation 2)
    (64, 128, 5, 1, 16, 16),
    (64, 128, 5, 2, 16, 16),
    (128, 64, 5, 1, 64, 8),
    (64, 64, 3, 1, 64, 32),
    (128, 128, 3, 1, 4, 16),
    (8192, 16384, 0, 0, 4, 0),  # a CONV on CifarNet's FLATTEN, width *2 (seen in a search)
]


def gradient(conv, groups: int, stride: int, spatial: int):
    numbers = grouped_conv.channels_last(2 + spatial)

    def loss(x, w):
        return jnp.sum(jnp.sin(conv(x, w, (stride,) * spatial, "SAME", None, None, numbers,
                                    groups)))

    return jax.jit(jax.grad(loss, (0, 1)))


def per_tap_only(*args, **kwargs):
    """`grouped_conv.conv_general_dilated` without its CPU per-group branch."""
    saved = grouped_conv.PER_GROUP_MAX_GROUPS
    grouped_conv.PER_GROUP_MAX_GROUPS = 0
    try:
        return grouped_conv.conv_general_dilated(*args, **kwargs)
    finally:
        grouped_conv.PER_GROUP_MAX_GROUPS = saved


def seconds(fn, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, batch 32; gradient ms "
          f"(median of {args.rounds} alternating rounds)")
    print("| cin -> cout | kernel | stride | groups | size | lax grouped | per-tap gradient "
          "only | ours | speedup over lax | lax dense (same shape) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cin, cout, k, stride, groups, size in SHAPES:
        spatial = 2 if k else 0
        x = jax.random.normal(jax.random.PRNGKey(0), (32, *(size,) * spatial, cin))
        w = jax.random.normal(jax.random.PRNGKey(1), (*(k,) * spatial, cin // groups, cout))
        dense_w = jax.random.normal(jax.random.PRNGKey(1), (*(k,) * spatial, cin, cout))
        runs = {"lax": (gradient(jax.lax.conv_general_dilated, groups, stride, spatial), w),
                "per_tap": (gradient(per_tap_only, groups, stride, spatial), w),
                "ours": (gradient(grouped_conv.conv_general_dilated, groups, stride, spatial),
                         w),
                "dense": (gradient(jax.lax.conv_general_dilated, 1, stride, spatial), dense_w)}
        times: dict[str, list[float]] = {name: [] for name in runs}
        for fn, kernel in runs.values():
            jax.block_until_ready(fn(x, kernel))  # compile
        for _ in range(args.rounds):
            for name, (fn, kernel) in runs.items():
                times[name].append(seconds(fn, x, kernel))
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        shape = f"{k}x{k} | {stride} | {groups} | {size}" if k else f"none | - | {groups} | -"
        print(f"| {cin} -> {cout} | {shape} | {ms['lax']:.1f} | {ms['per_tap']:.1f} "
              f"| {ms['ours']:.1f} | **{ms['lax'] / ms['ours']:.1f}x** | {ms['dense']:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
