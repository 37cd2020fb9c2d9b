"""Choosing the reversible trainer, and running it as `train_and_eval` does.

Why: the search trains every candidate through `nas.train.train_and_eval`. A candidate that
is marked reversible (`nas.graph.reversible`) and whose estimated training memory exceeds
the device budget must go to `ReversibleTrainer` instead; this module holds the estimate,
the decision and the loop, so `train.py` only needs a two-line hook.

Estimate of the standard trainer's device memory per device: XLA's `memory_analysis()` of
the compiled standard train step (parameters, optimizer state, gradients as arguments and
outputs, activations as temporaries), lowered from `eval_shape` shapes, so nothing is
allocated and nothing runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging

from nas.graph import Model
from nas.graph.reversible import is_reversible
from nas.train import config as config_lib
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
    opt = jax.eval_shape(tx.init, params)

    def step(p, opt, images, labels):
        def loss_fn(p):
            logits = model.apply({"params": p}, images)
            return jnp.mean(steps.softmax_xent(logits, jax.nn.one_hot(labels, 10)))

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


def train_and_eval(
    config: ml_collections.ConfigDict,
    eval_perf: bool = True,
    callback: Callable[[int, Any], bool] | None = None,
    *,
    graph: Any = None,
    constants: Any = None,
    workdir: str | None = None,
    init_variables: Mapping[str, Any] | None = None,
    freeze: Iterable[str] = frozenset(),
    freeze_inherited: bool = False,
) -> tuple[Any, int, dict[str, Any]]:
    """`nas.train.train_and_eval` with the reversible trainer (same arguments and result).

    Simpler than the standard loop: no EMA, no batch statistics; checkpoints hold the
    per-layer host state, written array by array by orbax from host memory.
    """
    from nas.train import data as data_lib
    from nas.train.checkpoint import Checkpointer
    from nas.train.perf import Metrics
    from nas.train.reversible import ReversibleTrainer
    from nas.train.train import build_graph

    config = config_lib.with_defaults(config)
    inp = config.input
    if graph is None:
        graph, constants = build_graph(config.model_name, config.num_classes, inp.image_size)
    data_dir = data_lib.resolve_data_dir(inp.data_dir or None)
    n_train = len(data_lib.open_source(inp.data.name, inp.data.split, data_dir))
    source = data_lib.open_source(inp.data.name, inp.data.split, data_dir)
    train_ds = data_lib.make_train_dataset(
        source, data_lib.make_preprocess(inp.data.name, True, inp.image_size, inp.augment),
        local_batch_size=inp.batch_size, seed=config.seed,
        shuffle=inp.shuffle_buffer_size > 0, num_threads=inp.num_threads,
        prefetch=inp.prefetch)
    steps_per_epoch = n_train / inp.batch_size
    total_steps = max(1, int(steps_per_epoch * config.total_epochs))
    eval_data = data_lib.make_eval_data(inp.data.name, config.eval.data.split, data_dir,
                                        inp.image_size, config.eval.batch_size,
                                        jax.local_device_count())
    params = None
    if init_variables and init_variables.get("params"):
        from nas.graph.subgraph import inherit_params

        fresh = Model(graph, constants).init(
            jax.random.PRNGKey(config.seed),
            np.zeros((1, inp.image_size, inp.image_size, 3), np.float32))["params"]
        inherited, new = inherit_params(jax.tree.map(np.asarray, dict(fresh)),
                                        init_variables["params"])
        params = {**new, **inherited}
        if freeze_inherited:
            freeze = set(freeze) | set(inherited)
    trainer = ReversibleTrainer(
        graph, constants, config=config, image_shape=(inp.image_size, inp.image_size, 3),
        sched_kw={"total_steps": total_steps, "steps_per_epoch": steps_per_epoch,
                  "global_batch_size": inp.batch_size},
        params=params, seed=config.seed, frozen=freeze)
    ckpt = Checkpointer(workdir, keep=config.keep_ckpts) if workdir else None
    it = iter(train_ds)
    if ckpt is not None and ckpt.latest_step() is not None:
        state, meta = ckpt.restore(trainer.state())
        trainer.load_state(state)
        it.set_state(meta["data"])
    rng = jax.random.PRNGKey(config.seed)
    t0 = time.perf_counter()
    rates: list[float] = []
    epoch = math.floor(trainer.step / steps_per_epoch + 1e-9)
    acc = loss = 0.0
    stopped = False
    while trainer.step < total_steps and not stopped:
        start = time.perf_counter()
        trainer.train_step(next(it), rng)
        rates.append(inp.batch_size / jax.device_count() / (time.perf_counter() - start))
        new_epoch = math.floor(trainer.step / steps_per_epoch + 1e-9)
        if new_epoch > epoch or trainer.step == total_steps:
            epoch = max(new_epoch, epoch + 1)
            acc, loss = _evaluate(trainer, eval_data, config.num_classes)
            logging.info("reversible: epoch %d step %d acc %.4f", epoch, trainer.step, acc)
            if callback is not None and trainer.step < total_steps:
                stopped = not callback(epoch, Metrics(acc=acc, loss=loss, steps=trainer.step))
        if ckpt is not None and config.ckpt_steps and trainer.step % config.ckpt_steps == 0:
            ckpt.save(trainer.step, trainer.state(), {"data": it.get_state()})
    if ckpt is not None:
        ckpt.save(trainer.step, trainer.state(), {"data": it.get_state()}, force=True)
        ckpt.wait()
        ckpt.close()
    params_out = trainer.full_params
    metrics = Metrics(acc=acc, loss=loss, steps=trainer.step,
                      im_sec_core_train=float(np.median(rates[1:] or rates or [0.0])),
                      train_temp_bytes=trainer.max_temp_bytes(),
                      train_seconds=time.perf_counter() - t0)
    if eval_perf:
        from nas.train import perf

        metrics.num_params = perf.count_params(params_out)
    return metrics, epoch, {"params": params_out, "batch_stats": {}}


def _evaluate(trainer: Any, eval_data: Any, num_classes: int) -> tuple[float, float]:
    correct = total_loss = count = 0.0
    for batch in eval_data:
        logits = trainer.predict(np.asarray(batch["image"]).reshape(
            -1, *np.shape(batch["image"])[-3:]))
        labels = np.asarray(batch["label"]).reshape(-1)
        mask = np.asarray(batch["mask"]).reshape(-1)
        logp = jax.nn.log_softmax(logits, axis=-1)
        total_loss += float(np.sum(-np.take_along_axis(
            np.asarray(logp), labels[:, None], axis=-1)[:, 0] * mask))
        correct += float(np.sum((np.argmax(logits, -1) == labels) * mask))
        count += float(np.sum(mask))
    del num_classes
    return correct / max(count, 1.0), total_loss / max(count, 1.0)
