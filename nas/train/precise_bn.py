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
import numpy as np

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


def present(momenta: Mapping[str, float], batch_stats: Mapping[str, Any]) -> list[str]:
    """The BN ops of `momenta` that have statistics in `batch_stats`: the ones recomputed
    (`batch_statistics` returns exactly these, `averaged` replaces exactly these)."""
    return [name for name in momenta if name in batch_stats]


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
        # From zero, flax's update m * old + (1 - m) * batch leaves (1 - m) * batch.
        stats = dict(variables.get("batch_stats", {}))
        names = present(momenta, stats)
        for name in names:
            stats[name] = jax.tree.map(jax.numpy.zeros_like, stats[name])
        _, updated = model.apply({**variables, "batch_stats": stats},
                                 {input_name: x} if input_name else x,
                                 deterministic=True, training=True, mutable=["batch_stats"])
        return {name: jax.tree.map(lambda a, m=momenta[name]: a / (1.0 - m),
                                   updated["batch_stats"][name]) for name in names}

    return one_batch


def averaged(batch_stats: BatchStats, per_batch: Sequence[BatchStats],
             momenta: Mapping[str, float]) -> BatchStats:
    """`batch_stats` with those of the BN ops `momenta` names replaced by their average over
    `per_batch` (each {op name: {"mean", "var"}} of one batch); unchanged without batches."""
    stats = dict(batch_stats)
    names = present(momenta, stats)
    if not names or not per_batch:
        return stats
    total = None
    for batch in per_batch:
        got = jax.device_get({name: batch[name] for name in names})
        total = got if total is None else jax.tree.map(np.add, total, got)
    for name in names:
        stats[name] = jax.tree.map(lambda a: np.asarray(a / len(per_batch), np.float32),
                                   total[name])
    return stats


def statistics_fn(model: Any, names: Iterable[str] | None = None,
                  input_name: str | None = None
                  ) -> Callable[[dict[str, Any], Sequence[np.ndarray]], BatchStats]:
    """(variables, image batches) -> the variables' batch_stats with those of the BN ops
    `names` (default: all) replaced by their average over the batches; compiled once per
    model. (A trainer computes them in its eval program instead: `steps.make_eval_step`.)

    `input_name`: as in `batch_statistics`."""
    one_batch = jax.jit(batch_statistics(model, names, input_name))
    momenta = recomputable(model.graph, names)

    def run(variables: dict[str, Any], batches: Sequence[np.ndarray]) -> BatchStats:
        return averaged(dict(variables.get("batch_stats", {})),
                        [one_batch(variables, x) for x in batches], momenta)

    return run


def eval_shaped(images: Sequence[np.ndarray], devices: int, eval_rows: int
                ) -> list[tuple[dict[str, np.ndarray], int]]:
    """(batch, shares) pairs carrying the image batches `images` to an eval program (see
    `steps.make_eval_step`): each batch has `eval_rows` rows, split over `devices` devices
    as an evaluation is; device d's share starts with one of `images` (the rest zeros, no
    example masked in), and the first `shares` shares carry one. A batch of more rows than
    a device's share is cut to it."""
    share = eval_rows // devices
    out = []
    for start in range(0, len(images), devices):
        group = images[start:start + devices]
        x = np.zeros((devices, share, *group[0].shape[1:]), np.float32)
        for d, batch in enumerate(group):
            x[d, :min(len(batch), share)] = batch[:share]
        out.append(({"image": x.reshape(devices * share, *x.shape[2:]),
                     "label": np.zeros(devices * share, np.int32),
                     "mask": np.zeros(devices * share, np.float32)}, len(group)))
    return out
