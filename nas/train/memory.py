"""Which trainer a candidate needs, from its estimated device memory, decided before training.

Why: the search trains every candidate through `train_and_eval`. A reversible candidate
whose standard training step would not fit the device budget goes to the reversible
trainer (device memory flat in depth); a candidate that does not fit and is *not*
reversible can never train, so it is rejected before any step with
`DeviceBudgetExceeded`, whose message carries the estimate and the budget (the search
records it as `infeasible`).

Estimate of the standard step's memory per device: XLA's `memory_analysis()` of the
compiled standard train step (parameters, optimizer state, gradients as arguments and
outputs, activations as temporaries), lowered from `eval_shape` shapes, so nothing is
allocated and nothing runs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from absl import logging

from nas.graph import Model
from nas.graph.reversible import is_reversible
from nas.train import config as config_lib
from nas.train import mesh as mesh_lib
from nas.train import optim, steps

MiB = 2**20


class DeviceBudgetExceeded(ValueError):  # noqa: N818 (a ValueError, named for what happened)
    """A candidate's standard training step needs more device memory than the budget and
    it is not reversible: it can never train here (record it as infeasible)."""

    def __init__(self, need: int, budget: int) -> None:
        self.need, self.budget = int(need), int(budget)
        super().__init__(
            f"standard training step needs ~{need / MiB:.1f} MiB per device ({need} bytes), "
            f"over the device_memory_budget of {budget / MiB:.1f} MiB ({budget} bytes), and "
            f"the graph is not reversible (no ReversibleSpec marking), so the reversible "
            f"trainer cannot take it")

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        """Rebuilt from (need, budget), so it crosses process boundaries (worker pools)."""
        return type(self), (self.need, self.budget)


def standard_step_memory(graph: Any, constants: Any, config: Any, batch_size: int,
                         image_shape: tuple[int, ...]) -> dict[str, int]:
    """{"temp", "total"} bytes of the compiled standard step on one device's batch."""
    model = Model(graph, constants)
    num_classes = int(config.get("num_classes", 10))
    x = jax.ShapeDtypeStruct((batch_size, *image_shape), jnp.float32)
    variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                                  jnp.zeros((1, *image_shape))))
    params, stats = variables["params"], variables.get("batch_stats", {})
    tx, _ = optim.make(config, params, {"total_steps": 10})
    opt = jax.eval_shape(tx.init, params)

    def step(p, opt, stats, images, labels):
        def loss_fn(p):
            v = {"params": p, **({"batch_stats": stats} if stats else {})}
            logits, new = model.apply(v, images, training=True, mutable=["batch_stats"])
            loss = jnp.mean(steps.softmax_xent(logits, jax.nn.one_hot(labels, num_classes)))
            return loss, new.get("batch_stats", {})

        grads, stats = jax.grad(loss_fn, has_aux=True)(p)
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt, stats

    labels = jax.ShapeDtypeStruct((batch_size,), jnp.int32)
    compiled = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, opt, stats, x,
                                                             labels).compile()
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


def select_trainer(config: Any, graph: Any, constants: Any) -> str:
    """"standard" or "reversible" for this candidate; raises `DeviceBudgetExceeded`.

    trainer="standard" / "reversible": as configured (no estimate). trainer="auto": with a
    known budget, estimate the standard step; over the budget a reversible graph goes to
    the reversible trainer and any other graph is rejected. Without a budget: standard.
    """
    if config.trainer in ("standard", "reversible"):
        return config.trainer
    budget = device_budget(config)
    if budget is None:
        return "standard"
    per_device = max(1, int(config.input.batch_size) // mesh_lib.size(
        mesh_lib.from_config(config)))
    need = standard_step_memory(graph, constants, config, per_device,
                                config_lib.image_shape(config))["total"]
    logging.info("standard step needs ~%.1f MiB per device, budget %.1f MiB", need / MiB,
                 budget / MiB)
    if need <= budget:
        return "standard"
    if is_reversible(constants):
        return "reversible"
    raise DeviceBudgetExceeded(need, budget)

