"""Precise-BN statistics inside the eval program against a program of their own.

Why: a trainer evaluates with running averages and recomputes them for the final weights
(nas.train.precise_bn). As two programs, every network with batch norms compiled both; now
the eval step holds both as the branches of one `lax.cond` (`steps.make_eval_step`). This
prints, side by side in one process (cold compiles: in-memory caches cleared, no
persistent cache; best of `--rounds`):

  compile   the eval program (before: + the statistics program)
  eval      one evaluation batch with the running averages
  stats     the statistics of `--bn-batches` training batches of `--train-batch` images
            (now: each carried in an eval-shaped batch)

    python benchmarks/eval_statistics.py [--model cnn-bn] [--rounds 3]

`cnn-bn` is the README's CifarNet with a batch norm after each convolution (the README's
children add batch norms to a network without any); other names are zoo models.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from nas import zoo
from nas.graph import Model, new_op
from nas.train import mesh as mesh_lib
from nas.train import precise_bn, steps


def before(model: Model, num_classes: int):
    """The programs before the eval step computed the statistics: an eval step without
    the flag (under pmap, as then), and the statistics as a jitted training-mode pass from
    zeroed running averages."""
    def eval_fn(variables, batch):
        logits = model.apply(variables, batch["image"], deterministic=True, training=False)
        mask = batch["mask"]
        loss = steps.softmax_xent(logits, jax.nn.one_hot(batch["label"], num_classes)) * mask
        correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32) * mask
        return jax.lax.psum((jnp.sum(correct), jnp.sum(loss), jnp.sum(mask)), steps.AXIS)

    momenta = precise_bn.recomputable(model.graph)

    def one_batch(variables, x):
        stats = {k: jax.tree.map(jnp.zeros_like, v) for k, v in variables["batch_stats"].items()}
        _, upd = model.apply({**variables, "batch_stats": stats}, x, deterministic=True,
                             training=True, mutable=["batch_stats"])
        return {k: jax.tree.map(lambda a, m=m: a / (1 - m), upd["batch_stats"][k])
                for k, m in momenta.items()}

    return jax.pmap(eval_fn, axis_name=steps.AXIS), jax.jit(one_batch)


def cnn_with_batch_norms(num_classes: int) -> tuple:
    """CifarNet with a batch norm between each convolution and its ReLU."""
    graph, constants, _ = zoo.build("cnn", num_classes, 32)
    convs = {op.name for op in graph.ops if op.type.name == "CONV"}
    ops = []
    for op in graph.ops:
        if op.type.name == "RELU" and op.input_names[0].split(":")[0] in convs:
            bn = new_op(f"{op.name}_bn", "BATCH_NORM", [op.input_names[0]])
            ops += [bn, dataclasses.replace(op, input_names=[bn.output_names[0]])]
        else:
            ops.append(op)
    return dataclasses.replace(graph, ops=ops), constants


def timed(fn, *args) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn-bn")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--eval-batch", type=int, default=360)
    parser.add_argument("--train-batch", type=int, default=64)
    parser.add_argument("--bn-batches", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    graph, constants = (cnn_with_batch_norms(10) if args.model == "cnn-bn"
                        else zoo.build(args.model, 10, args.image_size)[:2])
    model = Model(graph, constants)
    n = jax.local_device_count()
    rng = np.random.default_rng(0)
    shape = (args.image_size, args.image_size, 3)

    def images(count: int) -> np.ndarray:
        return rng.standard_normal((count, *shape)).astype(np.float32)

    variables = jax.tree.map(np.asarray, model.init(jax.random.PRNGKey(0), images(1)))
    eval_batch = {"image": images(args.eval_batch), "label": np.zeros(args.eval_batch, np.int32),
                  "mask": np.ones(args.eval_batch, np.float32)}
    per_device = args.train_batch // n
    old_bn = [images(per_device) for _ in range(args.bn_batches)]
    new_bn = precise_bn.eval_shaped(old_bn, n, args.eval_batch)
    # before: pmap's layout (a leading device axis); now: the mesh's
    var_p = jax.tree.map(lambda x: np.broadcast_to(x, (n, *np.shape(x))), variables)
    ev_p = jax.tree.map(lambda x: x.reshape(n, -1, *x.shape[1:]), eval_batch)
    mesh = mesh_lib.build()
    var_r, ev = mesh_lib.put_replicated(variables, mesh), mesh_lib.put_sharded(eval_batch, mesh)
    flags = {use: mesh_lib.put_replicated(np.asarray(use), mesh) for use in (False, True)}
    now = steps.eval_program(steps.make_eval_step(model, 10, statistics_rows=per_device),
                             mesh)
    old_eval, old_stats = before(model, 10)
    seconds: dict[str, dict[str, list[float]]] = {"before": {}, "now": {}}

    def record(which: str, what: str, s: float) -> None:
        seconds[which].setdefault(what, []).append(s)

    for _ in range(args.rounds):
        jax.clear_caches()  # each round compiles cold
        t = time.perf_counter()
        old_eval_c = old_eval.lower(var_p, ev_p).compile()
        old_stats_c = old_stats.lower(variables, old_bn[0]).compile()
        record("before", "compile", time.perf_counter() - t)
        jax.clear_caches()
        t = time.perf_counter()
        now_c = now.lower(var_r, ev, flags[False]).compile()
        record("now", "compile", time.perf_counter() - t)
        for _ in range(2):  # the first call of each warms its buffers
            e_old = timed(old_eval_c, var_p, ev_p)
            e_now = timed(now_c, var_r, ev, flags[False])
            s_old = timed(lambda c: [c(variables, x) for x in old_bn], old_stats_c)
            s_now = timed(lambda c: [c(var_r, mesh_lib.put_sharded(b, mesh), flags[True])
                                     for b, _ in new_bn], now_c)
        record("before", "eval", e_old)
        record("now", "eval", e_now)
        record("before", "stats", s_old)
        record("now", "stats", s_now)
    print(f"{args.model} at {args.image_size}px, {jax.default_backend()} x{n}, eval batch "
          f"{args.eval_batch}; statistics of {args.bn_batches} x {per_device} images; best of "
          f"{args.rounds}\n")
    print("| | before s | now s | now / before |")
    print("|---|---:|---:|---:|")
    for what in ("compile", "eval", "stats"):
        b, w = min(seconds["before"][what]), min(seconds["now"][what])
        print(f"| {what} | {b:.3f} | {w:.3f} | {w / b:.2f}x |")
    med = {k: statistics.median(v) for k, v in seconds["now"].items()}
    print(f"\nmedians now: {', '.join(f'{k} {v:.3f} s' for k, v in med.items())}")


if __name__ == "__main__":
    main()
