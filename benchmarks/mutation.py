"""Mutation benchmark: how often propose_child yields a child, whether children are valid,
how long one takes, and how much of the parent they inherit.

    python benchmarks/mutation.py [--n 50] [--models cnn,resnet18] [--warm] [--store]
                                  [--recovery]

For each model, `--n` seeded calls of `propose_child` with the default config, timed from
the call to the returned child (the parent's shapes are computed inside the call). A child
is *valid* when it runs a forward pass with the parent's output shape, satisfies its mutated
properties, and has a fingerprint different from its parent's. The first pass runs in a
fresh process, so it pays every one-time compile (per-op shape and pairing caches);
`--warm` repeats the same seeds to show the steady state of a long search. `--store` runs
each model in two more fresh processes sharing a new on-disk property store
(`nas.properties.op_cache`, which the search driver enables): the first fills it, the
second reads it, as a second search (or a restarted driver) would. `--recovery`
compares function-preserving children with ordinary ones on a small learnable task.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from nas.graph import Model
from nas.mutation import NoChildFound, propose_child
from nas.properties import op_cache
from nas.properties.fingerprint import fingerprint_graph
from nas.synthesis.variables import build_variables
from nas.zoo import builder

INPUT = {"input": jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)}


def parent(name: str):
    graph, constants, _ = builder(name, 10, 32)()
    variables = build_variables(graph, constants, INPUT, None, seed=0).variables
    return graph, constants, variables


def valid(child, graph, constants) -> bool:
    try:
        out = Model(child.graph, child.constants).apply(child.variables, jnp.ones((2, 32, 32, 3)))
        return (out.shape == (2, 10) and bool(jnp.all(jnp.isfinite(out)))
                and child.satisfies_properties()
                and fingerprint_graph(child.graph, child.constants, INPUT)
                != fingerprint_graph(graph, constants, INPUT))
    except Exception:  # noqa: BLE001 - any failure makes the child invalid
        return False


def run(name: str, seeds: range, label: str) -> None:
    graph, constants, variables = parent(name)
    times, inherited_frac, n_valid, reasons = [], [], 0, []
    for seed in seeds:
        start = time.perf_counter()
        try:
            child = propose_child(graph, constants, variables, seed=seed)
        except NoChildFound as e:
            reasons.append(str(e).split(";", 1)[-1].strip()[:60])
            continue
        times.append(time.perf_counter() - start)
        sizes = {k: sum(x.size for x in jax.tree.leaves(v))
                 for k, v in child.variables["params"].items()}
        inherited_frac.append(sum(sizes[k] for k in child.inherited) / sum(sizes.values()))
        n_valid += valid(child, graph, constants)
    n = len(seeds)
    t = np.array(times) if times else np.array([np.nan])
    print(f"| {name} | {label} | {len(times)}/{n} = {len(times) / n:.0%} | "
          f"{n_valid}/{max(len(times), 1)} = {n_valid / max(len(times), 1):.0%} | "
          f"{np.median(t):.2f} | {np.percentile(t, 90):.2f} | "
          f"{np.mean(inherited_frac) if inherited_frac else float('nan'):.1%} |", flush=True)
    for reason in sorted(set(reasons)):
        print(f"|   failure: {reason} ({reasons.count(reason)}x) |")


def recovery(seeds: range, steps: int = 10) -> None:
    """Training loss of ordinary vs function-preserving children of a briefly trained
    CifarNet on a small learnable task (batch 64, SGD 0.01 with momentum, full batch)."""
    import optax

    rng = np.random.default_rng(0)
    prototypes = rng.normal(size=(10, 32, 32, 3))  # digits-like: one pattern per class
    y = jnp.asarray(rng.integers(0, 10, size=64))
    x = jnp.asarray(prototypes[np.asarray(y)] + rng.normal(size=(64, 32, 32, 3)), jnp.float32)

    def train(graph, constants, variables, n):
        model = Model(graph, constants)
        tx = optax.sgd(0.01, momentum=0.9)

        def loss_fn(params, rest, xs, ys):
            logits = model.apply({"params": params, **rest}, xs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean()

        @jax.jit
        def step(params, opt, rest, xs, ys):
            loss, grads = jax.value_and_grad(loss_fn)(params, rest, xs, ys)
            updates, opt = tx.update(grads, opt, params)
            return optax.apply_updates(params, updates), opt, loss

        evaluate = jax.jit(loss_fn)
        params = variables["params"]
        rest = {k: v for k, v in variables.items() if k != "params"}
        opt = tx.init(params)
        losses = [float(evaluate(params, rest, x, y))]
        for _ in range(n):
            params, opt, _ = step(params, opt, rest, x, y)
            losses.append(float(evaluate(params, rest, x, y)))
        return {"params": params, **rest}, losses

    graph, constants, variables = parent("cnn")
    variables, parent_losses = train(graph, constants, variables, 10)
    _, more = train(graph, constants, variables, steps)
    print(f"parent: loss {parent_losses[0]:.3f} at init, {parent_losses[-1]:.3f} after 10 "
          f"steps, {more[-1]:.3f} after {steps} more")
    print(f"| seed | ordinary child: loss at 0 / after {steps} | "
          f"function-preserving child: loss at 0 / after {steps} |")
    print("|---|---|---|")
    sums = {False: [], True: []}
    for seed in seeds:
        row = []
        for preserving in (False, True):
            config = {"function_preserving": preserving, "linear_p": None}
            try:
                child = propose_child(graph, constants, variables, seed=seed, config=config)
            except NoChildFound:
                row.append("no child")
                continue
            if preserving and not child.function_preserving:
                row.append("(not preservable)")
                continue
            _, losses = train(child.graph, child.constants, child.variables, steps)
            sums[preserving].append((losses[0], losses[-1]))
            row.append(f"{losses[0]:.3f} / {losses[-1]:.3f}")
        print(f"| {seed} | {row[0]} | {row[1]} |", flush=True)
    for preserving, values in sums.items():
        if values:
            start, end = np.mean(values, axis=0)
            kind = "function-preserving" if preserving else "ordinary"
            print(f"mean over {len(values)} {kind} children: {start:.3f} at 0, {end:.3f} "
                  f"after {steps} steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--models", default="cnn,resnet18")
    parser.add_argument("--warm", action="store_true", help="repeat the seeds with warm caches")
    parser.add_argument("--store", action="store_true",
                        help="also two fresh processes per model sharing a new property store")
    parser.add_argument("--recovery", action="store_true")
    parser.add_argument("--property-cache", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--label", default="cold process", help=argparse.SUPPRESS)
    args = parser.parse_args()
    op_cache.enable(args.property_cache)
    if args.property_cache == "none":  # not a child process of --store
        print("| model | pass | yield a child | valid | median s/child | p90 s/child | "
              "params inherited |")
        print("|---|---|---|---|---|---|---|")
    for name in args.models.split(",") if args.n > 0 else []:
        run(name, range(args.n), args.label)
        if args.warm:
            run(name, range(args.n), "warm caches")
        if args.store:
            store = os.path.join(tempfile.mkdtemp(prefix="op_store_"), "ops.sqlite")
            for label in ("fresh process, empty store", "fresh process, store of the above"):
                subprocess.run([sys.executable, __file__, "--n", str(args.n), "--models", name,
                                "--property-cache", store, "--label", label], check=True)
    if args.recovery:
        recovery(range(8))


if __name__ == "__main__":
    main()
