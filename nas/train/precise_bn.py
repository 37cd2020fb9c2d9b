"""Batch-norm statistics of the current weights ("precise BN"), for evaluation.

Why: a BatchNorm's running averages move by (1 - momentum) per train step (1 % with flax's
default 0.99). A child fine-tuned for one short epoch is evaluated with averages that still
mostly describe its parent's activations: in the README searches, children measured at
0.11-0.52 accuracy scored 0.88-0.96 with statistics of their own weights. Recomputing the
statistics on a few training batches of the final weights measures the network that was
trained; the running averages of the training state are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nas.graph import batch_norm
from nas.graph.ops import OpType

BatchStats = dict[str, Any]


def recomputable(graph: Any, names: Iterable[str] | None = None) -> dict[str, float]:
    """{BN op name: momentum} for the batch norms of `graph` (or those of `names`) whose
    statistics follow the batches in training mode."""
    wanted = None if names is None else set(names)
    out = {}
    for op in graph.ops:
        if op.type is not OpType.BATCH_NORM or (wanted is not None and op.name not in wanted):
            continue
        momentum = float(op.op_kwargs.get("momentum", 0.99))
        if momentum < 1.0 and "use_running_average" not in op.input_kwargs:
            out[op.name] = momentum
    return out


def batch_statistics(model: Any, names: Iterable[str] | None = None,
                     input_name: str | None = None
                     ) -> Callable[[dict[str, Any], jax.Array], BatchStats]:
    """(variables, image batch) -> {BN op name: statistics of that batch} for the BN ops
    `names` (default: all) that have statistics; traceable, to be compiled by the caller
    (alone in `statistics_fn`, or inside a bigger program such as a fit).

    `input_name`: feed the model a dict {input_name: x} (a graph cut mid-network) instead of
    the image tensor."""
    momenta = recomputable(model.graph, names)

    def one_batch(variables: dict[str, Any], x: jax.Array) -> BatchStats:
        _, sown = model.apply(variables, {input_name: x} if input_name else x,
                              deterministic=True, training=jnp.asarray(True),
                              mutable=[batch_norm.COLLECTION])
        stats = batch_norm.sown_statistics(sown)
        return {name: stats[name] for name in momenta
                if name in variables.get("batch_stats", {})}

    return one_batch


def averaged(batch_stats: BatchStats, per_batch: Sequence[BatchStats],
             momenta: Mapping[str, float]) -> BatchStats:
    """`batch_stats` with those of the BN ops `momenta` names replaced by their average over
    `per_batch` (each {op name: {"mean", "var"}} of one batch); unchanged without batches."""
    stats = dict(batch_stats)
    present = [n for n in momenta if n in stats]
    if not present or not per_batch:
        return stats
    for name in present:
        stats[name] = jax.tree.map(
            lambda *each: np.mean(np.stack([np.asarray(a, np.float32) for a in each]), axis=0),
            *[jax.device_get(b[name]) for b in per_batch])
    return stats


def statistics_fn(model: Any, names: Iterable[str] | None = None,
                  input_name: str | None = None
                  ) -> Callable[[dict[str, Any], Sequence[np.ndarray]], BatchStats]:
    """(variables, image batches) -> the variables' batch_stats with those of the BN ops
    `names` (default: all) replaced by their average over the batches; compiled once per
    model. (A trainer reads them through its eval program instead: `steps.make_eval_step`.)

    `input_name`: as in `batch_statistics`."""
    one_batch = jax.jit(batch_statistics(model, names, input_name))
    momenta = recomputable(model.graph, names)

    def run(variables: dict[str, Any], batches: Sequence[np.ndarray]) -> BatchStats:
        return averaged(dict(variables.get("batch_stats", {})),
                        [one_batch(variables, x) for x in batches], momenta)

    return run


def eval_batches(inp: Any, batches: int, train_batch: int, eval_batch: int, seed: int
                 ) -> list[dict[str, np.ndarray]]:
    """Training images for the statistics, shaped as evaluation batches (`eval_batch`
    examples, labels and masks zero) so the eval program computes them: as many as
    `batches` training batches of `train_batch` hold (rounded up to whole batches; each
    device takes its share of each, as it does of a training batch)."""
    from nas.train import data as data_lib

    count = -(-batches * train_batch // eval_batch)
    return [{"image": x, "label": np.zeros(len(x), np.int32), "mask": np.zeros(len(x), np.float32)}
            for x in data_lib.plain_batches(inp, count, eval_batch, seed)]
