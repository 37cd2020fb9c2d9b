"""Abstract vs concrete property inference on whole zoo graphs and 3-op subgraphs.

    python benchmarks/properties.py [--reps 7] [--models cifarnet,resnet18,resnet50]

Prints warm medians (ms) of abstract and concrete inference of each property, side by side
in one run, and their ratio. Abstract inference reuses the per-op shape and pairing caches
that the warm-up filled, which is the steady state of a search: a parent's shapes are
computed once and every subgraph and candidate of it reuses them. The cold column is the
first abstract inference after emptying the shape and pairing caches (what a new parent
costs: its shape pass, and per-op Jacobians for pairing).
The new-graph column empties the per-graph shape cache before each run but keeps the per-op
caches: the cost for a candidate child graph made of op kinds seen before; the ratio uses
it. Depth is structural: its "concrete" inference is the same computation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from nas.graph import Model, OpType
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.properties import depth, linear, shape, tensor_shapes
from nas.zoo import cnn, resnetv1

MODELS: dict[str, Callable] = {
    "cifarnet": lambda: (cnn.CifarNet(), (1, 32, 32, 3)),
    "resnet18": lambda: (resnetv1.ResNet18(num_classes=10, input_resolution="small"),
                         (1, 32, 32, 3)),
    "resnet50": lambda: (resnetv1.ResNet50(num_classes=1000, input_resolution="large"),
                         (1, 224, 224, 3)),
}
PROPERTIES = {"shape": shape.ShapeProperty, "depth": depth.DepthProperty,
              "linear": linear.LinopProperty}


def three_op_spec(graph) -> list[SubgraphNode]:
    """conv -> (bn ->) relu style chain of 3 ops from the middle of the graph, self-mapped."""
    ops = graph.ops
    for i in range(len(ops) // 3, len(ops) - 2):
        a, b, c = ops[i:i + 3]
        chained = b.input_names == a.output_names[:1] and c.input_names == b.output_names[:1]
        if a.type is OpType.CONV and chained:
            return [SubgraphNode(a), SubgraphNode(b), SubgraphNode(c, [c.output_names[0]])]
    raise ValueError("no 3-op chain starting with a conv found")


def timed(fn: Callable[[], object], reps: int, budget_s: float) -> float:
    """Median wall time (ms) over up to `reps` runs, stopping early past `budget_s`."""
    times = []
    start = time.perf_counter()
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget_s:
            break
    return 1e3 * statistics.median(times)


def bench(name: str, reps: int, budget_s: float) -> list[tuple]:
    (graph, constants, _), input_shape = MODELS[name]()
    x = jnp.ones(input_shape)
    state = Model(graph, constants).init(jax.random.PRNGKey(0), {"input": x})
    rows = []
    for label, spec in (("whole", None), ("3-op", three_op_spec(graph))):
        sm = SubgraphModel(graph, constants, state, {"input": x}, spec)
        for prop_name, cls in PROPERTIES.items():
            tensor_shapes.clear_caches()
            linear.clear_cache()
            t = time.perf_counter()
            cls().infer(sm)
            cold = 1e3 * (time.perf_counter() - t)
            abstract = timed(lambda c=cls, m=sm: c().infer(m), reps, budget_s)
            fresh = timed(lambda c=cls, m=sm: (tensor_shapes.clear_caches(ops=False), c().infer(m)),
                          reps, budget_s)
            cls().infer(sm, abstract=False)  # warm-up (compiles what can be reused)
            concrete = timed(lambda c=cls, m=sm: c().infer(m, abstract=False), reps, budget_s)
            row = (name, label, prop_name, cold, abstract, fresh, concrete, concrete / fresh)
            rows.append(row)
            print(f"{name:9} {label:6} {prop_name:7} cold {cold:9.1f}  abstract {abstract:8.2f}"
                  f"  new-graph {fresh:8.2f}  concrete {concrete:9.1f}"
                  f"  ratio {concrete / fresh:8.1f}x", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds per measurement before stopping early")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        rows += bench(name, args.reps, args.budget)
    print()
    print("| model | graph | property | abstract cold ms | abstract ms | abstract new-graph ms "
          "| concrete ms | concrete / new-graph |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for model, label, prop, cold, abstract, fresh, concrete, ratio in rows:
        print(f"| {model} | {label} | {prop} | {cold:.1f} | {abstract:.2f} | {fresh:.2f} "
              f"| {concrete:.1f} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
