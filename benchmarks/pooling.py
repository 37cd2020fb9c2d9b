"""Does the max pool's gradient still cost more than its forward pass?

For max pools of the shapes mutation proposes on CifarNet (batch 32, 64 channels) and the
ResNet stem's, times the jitted forward + backward of `flax.linen.max_pool` (XLA's
`select_and_scatter` gradient) against `nas.graph.pooling.max_pool` (separable gradient),
alternating the two in rounds so machine noise hits both alike, and prints the speedup.

    python benchmarks/pooling.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from nas.graph import pooling

SHAPES = [  # spatial size, channels, window, stride, padding
    (32, 64, 4, 1, "SAME"),
    (32, 64, 3, 1, "SAME"),
    (32, 64, 2, 2, "SAME"),
    (16, 128, 3, 2, "SAME"),
    (32, 64, 2, 1, "VALID"),
    (112, 64, 3, 2, "SAME"),  # ResNet's stem at 224x224
]


def gradient(pool, window: int, stride: int, padding: str):
    def loss(x):
        return jnp.sum(jnp.sin(pool(x, (window, window), (stride, stride), padding)))

    return jax.jit(jax.grad(loss))


def seconds(fn, x, repeats: int = 5) -> float:
    fn(x).block_until_ready()
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x).block_until_ready()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    print(f"backend {jax.default_backend()}, batch {args.batch}, median of {args.rounds} rounds")
    print("| input | window / stride | flax ms | nas ms | speedup |")
    print("|---|---|---:|---:|---:|")
    for size, channels, window, stride, padding in SHAPES:
        x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, size, size, channels))
        fns = [gradient(p, window, stride, padding) for p in (nn.max_pool, pooling.max_pool)]
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for i, fn in enumerate(fns):
                times[i].append(seconds(fn, x))
        flax_s, ours_s = (statistics.median(t) for t in times)
        print(f"| {size}x{size}x{channels} | {window}x{window} / {stride} {padding} | "
              f"{flax_s * 1e3:.1f} | {ours_s * 1e3:.1f} | {flax_s / ours_s:.1f}x |")


if __name__ == "__main__":
    main()
