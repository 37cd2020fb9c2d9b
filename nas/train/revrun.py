"""Choosing the trainer strategy: standard, or reversible when the standard one won't fit.

Why: the search trains every candidate through `nas.train.train_and_eval`, which has one
step loop and hands each step to a strategy (`nas.train.trainers`). A candidate that is
marked reversible (`nas.graph.reversible`) and whose estimated training memory exceeds the
device budget must go to the reversible strategy; this module holds the estimate and the
decision (and imports nothing of `train.py`).

Estimate of the standard trainer's device memory per device: XLA's `memory_analysis()` of
the compiled standard train step (parameters, optimizer state, gradients as arguments and
outputs, activations as temporaries), lowered from `eval_shape` shapes, so nothing is
allocated and nothing runs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from nas.graph import Model
from nas.graph.reversible import is_reversible
from nas.train import optim, steps


def _abstract(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.result_type(x)), tree)


def standard_step_memory(graph: Any, constants: Any, config: Any, batch_size: int,
                         image_shape: tuple[int, ...]) -> dict[str, int]:
    """{"temp", "total"} bytes of the compiled standard step on one device's batch."""
    model = Model(graph, constants)
    x = jax.ShapeDtypeStruct((batch_size, *image_shape), jnp.float32)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                               jnp.zeros((1, *image_shape))))["params"]
    tx, _ = optim.make(config, params, {"total_steps": 10})
    num_classes = int(config.num_classes)
    opt = jax.eval_shape(tx.init, params)

    def step(p, opt, images, labels):
        def loss_fn(p):
            logits = model.apply({"params": p}, images)
            return jnp.mean(steps.softmax_xent(logits, jax.nn.one_hot(labels, num_classes)))

        grads = jax.grad(loss_fn)(p)
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt

    labels = jax.ShapeDtypeStruct((batch_size,), jnp.int32)
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, opt, x, labels).compile()
    stats = compiled.memory_analysis()
    temp = int(stats.temp_size_in_bytes)
    total = int(stats.argument_size_in_bytes + stats.output_size_in_bytes + temp
                - stats.alias_size_in_bytes)
    return {"temp": temp, "total": total}


def device_budget(config: Any) -> int | None:
    """`config.device_memory_budget`, else the first device's own limit (None if unknown)."""
    if config.device_memory_budget:
        return int(config.device_memory_budget)
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # CPU and some plugins report nothing
        stats = {}
    limit = stats.get("bytes_limit")
    return int(limit) if limit else None


def use_reversible(config: Any, graph: Any, constants: Any) -> bool:
    """`trainer == "reversible"`; or `"auto"` with a reversible graph over the budget."""
    if config.trainer == "reversible":
        return True
    if config.trainer != "auto" or not is_reversible(constants):
        return False
    budget = device_budget(config)
    if budget is None:
        return False
    size = config.input.image_size
    per_device = max(1, config.input.batch_size // jax.device_count())
    need = standard_step_memory(graph, constants, config, per_device, (size, size, 3))["total"]
    logging.info("standard step needs ~%.1f MiB per device, budget %.1f MiB", need / 2**20,
                 budget / 2**20)
    return need > budget
