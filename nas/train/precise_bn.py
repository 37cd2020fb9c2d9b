"""Batch-norm statistics of the current weights ("precise BN"), for evaluation.

Why: a BatchNorm's running averages move by (1 - momentum) per train step (1 % with flax's
default 0.99). A child fine-tuned for one short epoch is evaluated with averages that still
mostly describe its parent's activations: in the README searches, children measured at
0.11-0.52 accuracy scored 0.88-0.96 with statistics of their own weights. Recomputing the
statistics on a few training batches of the final weights measures the network that was
trained; the running averages of the training state are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
        present = {name: m for name, m in momenta.items() if name in stats}
        for name in present:
            stats[name] = jax.tree.map(jax.numpy.zeros_like, stats[name])
        _, updated = model.apply({**variables, "batch_stats": stats},
                                 {input_name: x} if input_name else x,
                                 deterministic=True, training=True, mutable=["batch_stats"])
        return {name: jax.tree.map(lambda a, m=m: a / (1.0 - m), updated["batch_stats"][name])
                for name, m in present.items()}

    return one_batch


class Statistics:
    """(variables, image batches) -> batch_stats with those of the chosen BN ops replaced by
    their average over the batches (`statistics_fn`). `compile` builds its program ahead
    for a batch's shapes, so a trainer compiles it beside its steps instead of in its first
    evaluation, while it holds the device."""

    def __init__(self, model: Any, names: Iterable[str] | None, input_name: str | None
                 ) -> None:
        self.momenta = recomputable(model.graph, names)
        self._one_batch = jax.jit(batch_statistics(model, names, input_name))
        self._compiled: Any = None

    def compile(self, variables: dict[str, Any], batch: np.ndarray) -> None:
        self._compiled = self._one_batch.lower(variables, batch).compile()

    def __call__(self, variables: dict[str, Any], batches: Sequence[np.ndarray]
                 ) -> BatchStats:
        stats = dict(variables.get("batch_stats", {}))
        present = [n for n in self.momenta if n in stats]
        if not present or not batches:
            return stats
        one_batch = self._compiled or self._one_batch
        total = None
        for x in batches:
            got = jax.device_get(one_batch(variables, x))
            total = got if total is None else jax.tree.map(np.add, total, got)
        for name in present:
            stats[name] = jax.tree.map(lambda a: np.asarray(a / len(batches), np.float32),
                                       total[name])
        return stats


def statistics_fn(model: Any, names: Iterable[str] | None = None,
                  input_name: str | None = None) -> Statistics:
    """The batch-norm statistics of the BN ops `names` (default: all) averaged over image
    batches (`Statistics`); compiled once per model.

    `input_name`: as in `batch_statistics`."""
    return Statistics(model, names, input_name)
