"""Steps dispatched one by one against the same steps inside one program's loop.

Why: a fit (`nas.train.fit`) of a child's new ops is 40 small Adam steps. Moving them
into the program that prepares and evaluates the fit (a `lax.while_loop`) would make the
fit one program instead of two, but XLA:CPU runs convolutions inside control flow (loops,
conditionals) far slower than in a program's top level. This prints both, side by side,
for a convolution's gradient step like a fit's, so the choice per backend is measured.

    python benchmarks/loop_programs.py [--steps 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp


def conv_step(x: jax.Array):
    """One plain gradient step of a 3x3 convolution fitted to reproduce `x`."""

    def loss(w):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.mean(jnp.square(y - x))

    return lambda w: w - 0.01 * jax.grad(loss)(w)


def timed(fn, w, rounds: int) -> float:
    """Best of `rounds` wall times of fn(w) after a first (compiling) call."""
    jax.block_until_ready(fn(w))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(fn(w))
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    x = jax.random.normal(jax.random.PRNGKey(0), (16, 16, 16, 64))
    w = 0.05 * jax.random.normal(jax.random.PRNGKey(1), (3, 3, 64, 64))
    step = conv_step(x)
    one = jax.jit(step)
    in_cond = jax.jit(lambda w, go: jax.lax.cond(go, step, lambda v: v, w))

    def dispatched(w):
        for _ in range(args.steps):
            w = one(w)
        return w

    def conditional(w):
        for _ in range(args.steps):
            w = in_cond(w, True)
        return w

    runs = {
        "one program per step, dispatched from the host": dispatched,
        "lax.fori_loop in one program": jax.jit(
            lambda w: jax.lax.fori_loop(0, args.steps, lambda i, v: step(v), w)),
        "lax.while_loop in one program": jax.jit(lambda w: jax.lax.while_loop(
            lambda c: c[0] < args.steps, lambda c: (c[0] + 1, step(c[1])), (0, w))[1]),
        "each step inside lax.cond, dispatched": conditional,
    }
    seconds = {name: timed(fn, w, args.rounds) for name, fn in runs.items()}
    base = seconds["one program per step, dispatched from the host"]
    print(f"{args.steps} gradient steps of a 3x3 conv (16x16x16x64), backend "
          f"{jax.default_backend()}, best of {args.rounds}\n")
    print("| how the steps run | seconds | / dispatched |")
    print("|---|---:|---:|")
    for name, s in seconds.items():
        print(f"| {name} | {s:.3f} | {s / base:.1f}x |")


if __name__ == "__main__":
    main()
