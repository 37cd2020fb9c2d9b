"""Is the exported Flax code as fast to train as the IR interpreter?

Exports the README CifarNet (`configs/digits_cnn.py`: batch 64, 32x32x3, adam) with
`nas.export_flax`, loads the written model.py and variables.msgpack as a user would, and
times a jitted adam train step (batch statistics and dropout on, as in training) of the
exported module against the same step of the IR `Model`, alternating the two in one process
so machine noise hits both alike. Prints whether the two steps lower to the same program
(StableHLO text), the median step time of each and the ratio
(target: exported within 5 % of the interpreter). `--model resnet18` times ResNet18 (small:
batch norm, max pool, residual adds) instead.

    python benchmarks/flax_export.py [--model cnn|resnet18] [--rounds 9] [--steps 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import serialization

import nas
from nas.graph import Model
from nas.io.candidate import ExportedCandidate
from nas.zoo import cnn, resnetv1


def make_step(apply: Callable[..., Any], variables: dict[str, Any], x: jax.Array,
              labels: jax.Array) -> tuple[Callable[[int], float], float, str]:
    """A timer of `steps` jitted adam steps, the loss of the first step and the step's
    lowered program (StableHLO text)."""
    params = variables["params"]
    state = {k: v for k, v in variables.items() if k != "params"}
    tx = optax.adam(2e-3)
    opt_state = tx.init(params)

    @jax.jit
    def step(params: Any, state: Any, opt_state: Any, x: jax.Array, key: jax.Array) -> Any:
        def loss_fn(p: Any) -> Any:
            logits, new_state = apply({"params": p, **state}, x, key)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), {**state, **new_state}, opt_state, loss

    carry = [params, state, opt_state]
    key = jax.random.PRNGKey(0)
    program = step.lower(*carry, x, key).as_text()
    first = float(step(*carry, x, key)[-1])  # compiles

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            *new, loss = step(*carry, x, key)
            carry[:] = new
        loss.block_until_ready()
        return (time.perf_counter() - start) / steps

    return run, first, program


def load_exported(directory: str) -> tuple[Any, dict[str, Any]]:
    """model.py's `Model` and the variables, read as a user without nas reads them."""
    spec = importlib.util.spec_from_file_location("exported_model",
                                                  os.path.join(directory, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(os.path.join(directory, "variables.msgpack"), "rb") as f:
        return module.Model, serialization.msgpack_restore(f.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    if args.model == "cnn":
        graph, constants, _ = cnn.CifarNet()
    else:
        graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    shape = (32, 32, 3)
    x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, *shape))
    labels = jnp.arange(args.batch) % 10
    ir = Model(graph, constants)
    variables = jax.tree.map(np.asarray, ir.init(jax.random.PRNGKey(0), x))
    with tempfile.TemporaryDirectory() as tmp:
        cand = ExportedCandidate(path=args.model, graph=graph, constants=constants,
                                 variables=variables, input_shape=shape)
        exported_model, exported_variables = load_exported(
            str(nas.export_flax(cand, os.path.join(tmp, "code"))))

    def ir_apply(v: Any, x: jax.Array, key: jax.Array) -> Any:
        return ir.apply(v, x, deterministic=False, training=True, mutable=["batch_stats"],
                        rngs={"dropout": key})

    def exported_apply(v: Any, x: jax.Array, key: jax.Array) -> Any:
        return exported_model().apply(v, x, train=True, mutable=["batch_stats"],
                                      rngs={"dropout": key})

    runs, losses, programs = {}, {}, {}
    runs["ir"], losses["ir"], programs["ir"] = make_step(ir_apply, variables, x, labels)
    runs["exported"], losses["exported"], programs["exported"] = make_step(
        exported_apply, exported_variables, x, labels)
    print(f"jax {jax.__version__}, {jax.devices()}, load {os.getloadavg()[0]:.1f}, "
          f"{args.model}, batch {args.batch}; first-step loss IR {losses['ir']:.6f}, "
          f"exported {losses['exported']:.6f}; same lowered program: "
          f"{programs['ir'] == programs['exported']}", file=sys.stderr)
    times: dict[str, list[float]] = {"ir": [], "exported": []}
    for r in range(args.rounds):
        for name in (("ir", "exported") if r % 2 == 0 else ("exported", "ir")):
            times[name].append(runs[name](args.steps))
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print("| model | batch | IR step ms (median) | exported step ms (median) | "
          "exported / IR |")
    print("|---|---:|---:|---:|---:|")
    print(f"| {args.model} | {args.batch} | {ms['ir']:.1f} | {ms['exported']:.1f} | "
          f"{ms['exported'] / ms['ir']:.3f} |")


if __name__ == "__main__":
    main()
