"""`train_and_eval`: train one candidate data-parallel, evaluate it, measure its cost.

Reads top to bottom like big_vision's train.py: config -> data -> model -> (inheritance,
freezing) -> optimizer -> resume -> compile -> loop (log, eval, callback, checkpoint) ->
final metrics. Everything random is derived from `config.seed` and the step number, and
the data iterator state is checkpointed, so a run killed at any point and resumed ends with
the same parameters as one that never stopped.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from tqdm import tqdm

from nas.train import config as config_lib
from nas.train import data as data_lib
from nas.train import optim, perf, steps
from nas.train.checkpoint import Checkpointer
from nas.train.perf import Metrics

Callback = Callable[[int, Metrics], bool]


def build_graph(model_name: str, num_classes: int, image_size: int) -> tuple[Any, Any]:
    """(graph, constants) of a zoo model named in the config."""
    from nas import zoo

    if hasattr(zoo, "build"):
        graph, constants, _ = zoo.build(model_name, num_classes, image_size)
        return graph, constants
    if model_name == "cnn":  # until nas.zoo.build exists
        from nas.zoo import cnn

        graph, constants, _ = cnn.CifarNet(num_classes=num_classes)
        return graph, constants
    raise ValueError(f"config field 'model_name': unknown model {model_name!r}")


class JsonlWriter:
    """Appends one JSON object per line to `<workdir>/metrics.jsonl` (host 0 only)."""

    def __init__(self, workdir: str | None, enabled: bool) -> None:
        self.path = os.path.join(workdir, "metrics.jsonl") if workdir and enabled else None

    def write(self, record: dict[str, Any]) -> None:
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def _write_config(workdir: str, config: ml_collections.ConfigDict, graph_json: str | None):
    """config.json (and graph.json) via temp-then-rename, so readers never see half a file."""
    for name, text in (("config.json", config.to_json(indent=2)), ("graph.json", graph_json)):
        if text is None:
            continue
        tmp = os.path.join(workdir, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(workdir, name))


def _init_variables(model: Any, image_size: int, seed: int) -> dict[str, Any]:
    """Initialize on the host CPU (never twice on an accelerator), as plain dicts."""
    cpu = jax.devices("cpu")[0]
    x = np.zeros((1, image_size, image_size, 3), np.float32)
    with jax.default_device(cpu):
        rng = jax.random.PRNGKey(seed)
        variables = jax.jit(lambda r: model.init({"params": r, "dropout": r}, x))(rng)
        jax.block_until_ready(variables)  # a failed allocation raises here, not in asarray
    return jax.tree.map(np.asarray, {k: dict(v) for k, v in variables.items()})


def _inherit(
    params: dict[str, Any], parent: dict[str, Any] | None
) -> tuple[dict[str, Any], set[str]]:
    """Parent values for every op whose name, shapes and dtypes match; their names."""
    if not parent:
        return params, set()
    from nas.graph.subgraph import inherit_params

    inherited, new = inherit_params(params, parent)
    return {**new, **inherited}, set(inherited)


def train_and_eval(
    config: ml_collections.ConfigDict,
    eval_perf: bool = True,
    callback: Callback | None = None,
    *,
    graph: Any = None,
    constants: Any = None,
    workdir: str | None = None,
    init_variables: dict[str, Any] | None = None,
    freeze: Iterable[str] = frozenset(),
    freeze_inherited: bool = False,
    should_stop: Callable[[int], bool] | None = None,
) -> tuple[Metrics, int, dict[str, Any]]:
    """Train `graph` (or the config's zoo model); return (metrics, epochs, state).

    init_variables: a parent's {"params", "batch_stats"}; every op whose name and shapes
      match is inherited (frozen if `freeze_inherited`, else fine-tuned from it).
    freeze: op names whose params get no updates (and no optimizer state).
    callback(epoch, metrics) -> bool is called after each eval; False stops early.
    should_stop(step) -> bool is called after every train step; True stops training (the
      candidate is then evaluated and returned normally).
    state: {"params", "batch_stats"} (the EMA of them when ema_decay > 0).
    """
    if "train" in config:  # a search config: its `train` part trains one candidate
        config = config.train
    config = config_lib.with_defaults(config)
    if config.trainer != "standard":  # "reversible", or "auto" (by memory estimate)
        from nas.train import revrun

        if graph is None:
            graph, constants = build_graph(config.model_name, config.num_classes,
                                           config.input.image_size)
        if revrun.use_reversible(config, graph, constants):
            return revrun.train_and_eval(
                config, eval_perf, callback, graph=graph, constants=constants,
                workdir=workdir, init_variables=init_variables, freeze=freeze,
                freeze_inherited=freeze_inherited)
    is_host = jax.process_index() == 0
    ndev = jax.local_device_count()
    writer = JsonlWriter(workdir, is_host)

    # ---------------------------------------------------------------- data
    inp = config.input
    data_dir = data_lib.resolve_data_dir(inp.data_dir or None)
    global_batch = inp.batch_size
    if global_batch % jax.device_count():
        raise ValueError(f"config field 'input.batch_size': {global_batch} is not divisible "
                         f"by the {jax.device_count()} devices")
    local_batch = global_batch // jax.process_count()
    n_train = len(data_lib.open_source(inp.data.name, inp.data.split, data_dir))
    train_source = data_lib.open_source(
        inp.data.name,
        data_lib.host_split(inp.data.split, jax.process_index(), jax.process_count()),
        data_dir,
    )
    train_ds = data_lib.make_train_dataset(
        train_source,
        data_lib.make_preprocess(inp.data.name, True, inp.image_size, inp.augment),
        local_batch_size=local_batch, seed=config.seed,
        shuffle=inp.shuffle_buffer_size > 0, num_threads=inp.num_threads,
        prefetch=inp.prefetch,
    )
    steps_per_epoch = n_train / global_batch
    total_steps = max(1, int(steps_per_epoch * config.total_epochs))
    eval_data = data_lib.make_eval_data(
        inp.data.name, config.eval.data.split, data_dir, inp.image_size,
        config.eval.batch_size, ndev,
    )
    logging.info("%d train examples, global batch %d (%d per device on %d devices), "
                 "%d steps (%.2f per epoch)", n_train, global_batch,
                 global_batch // jax.device_count(), jax.device_count(), total_steps,
                 steps_per_epoch)

    # ---------------------------------------------------------------- model
    if graph is None:
        graph, constants = build_graph(config.model_name, config.num_classes, inp.image_size)
    from nas.graph import Model

    model = Model(graph, constants)
    variables = _init_variables(model, inp.image_size, config.seed)
    params, inherited = _inherit(variables["params"], (init_variables or {}).get("params"))
    batch_stats, _ = _inherit(variables.get("batch_stats", {}),
                              (init_variables or {}).get("batch_stats"))
    frozen_names = set(freeze) | (inherited if freeze_inherited else set())
    unknown = frozen_names - set(params)
    if unknown:
        raise ValueError(f"freeze: ops {sorted(unknown)} have no parameters in this graph")
    trainable = {k: v for k, v in params.items() if k not in frozen_names}
    frozen = {k: v for k, v in params.items() if k in frozen_names}
    logging.info("%d ops trainable, %d frozen, %d inherited", len(trainable), len(frozen),
                 len(inherited))

    # ---------------------------------------------------------------- optimizer
    tx, sched_fns = optim.make(config, trainable, dict(
        total_steps=total_steps, steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch))
    state = {
        "params": trainable,
        "frozen": frozen,
        "batch_stats": batch_stats,
        "opt_state": jax.tree.map(np.asarray, jax.block_until_ready(tx.init(trainable))),
        "ema": {"params": params, "batch_stats": batch_stats} if config.ema_decay else {},
        "step": np.int32(0),
    }

    # ---------------------------------------------------------------- resume
    ckpt = Checkpointer(workdir, keep=config.keep_ckpts) if workdir else None
    train_it = iter(train_ds)
    meta: dict[str, Any] = {"train_rates": [], "infer_rates": [], "epoch": 0}
    if is_host and workdir:
        os.makedirs(workdir, exist_ok=True)
        from nas.graph.serialize import graph_to_json

        _write_config(workdir, config, graph_to_json(graph, constants))
    if ckpt is not None and ckpt.latest_step() is not None:
        state, meta = ckpt.restore(state)
        train_it.set_state(meta["data"])
        logging.info("Resumed from step %d in %s", int(state["step"]), ckpt.directory)

    # ---------------------------------------------------------------- compile
    train_step = jax.pmap(
        steps.make_train_step(model, tx, config.num_classes, ema_decay=config.ema_decay,
                              ema_warmup_steps=config.ema_warmup_steps),
        axis_name=steps.AXIS, donate_argnums=(0,),
    )
    eval_step = jax.pmap(steps.make_eval_step(model, config.num_classes), axis_name=steps.AXIS)
    rng = steps.replicate(np.asarray(jax.random.PRNGKey(config.seed)), ndev)
    state_r = steps.replicate(state, ndev)
    first = next(train_it)
    sample = steps.shard(first, ndev)
    t0 = time.perf_counter()
    train_c = train_step.lower(state_r, sample, rng).compile()
    eval_vars = steps.replicate(_eval_variables(state), ndev)
    eval_sample = steps.shard(next(iter(eval_data)), ndev)
    eval_c = eval_step.lower(eval_vars, eval_sample).compile()
    compile_seconds = time.perf_counter() - t0
    temp_bytes, peak_bytes = perf.memory_bytes(train_c)
    logging.info("compiled in %.1fs; train step temp %.1f MiB, peak %.1f MiB per device",
                 compile_seconds, temp_bytes / 2**20, peak_bytes / 2**20)
    if config.trainer == "auto" and config.device_memory_budget and (
            peak_bytes > config.device_memory_budget):
        logging.warning("train step needs %d bytes per device, over device_memory_budget %d: "
                        "the reversible trainer (nas.train.reversible) fits such candidates",
                        peak_bytes, config.device_memory_budget)

    def evaluate(variables_r: Any) -> tuple[float, float, float]:
        """(accuracy, mean loss, images/sec/device of the eval steps alone)."""
        correct = loss = count = 0.0
        busy = 0.0
        for batch in eval_data:
            t = time.perf_counter()
            out = jax.device_get(eval_c(variables_r, steps.shard(batch, ndev)))
            busy += time.perf_counter() - t
            correct += float(out["correct"][0])
            loss += float(out["loss"][0])
            count += float(out["count"][0])
        if int(count) != eval_data.num_examples * jax.process_count() and jax.process_count() == 1:
            raise RuntimeError(f"eval saw {count} examples, expected {eval_data.num_examples}")
        rate = eval_data.batch_size * eval_data.num_batches / max(busy, 1e-9) / ndev
        return correct / max(count, 1.0), loss / max(count, 1.0), rate

    def save(step: int, force: bool = False) -> None:
        if ckpt is not None:
            ckpt.save(step, steps.unreplicate(state_r),
                      dict(meta, data=train_it.get_state()), force=force)

    # ---------------------------------------------------------------- train loop
    step = int(state["step"])
    epoch = int(meta["epoch"])
    pending = first if step < total_steps else None
    bar = tqdm(total=total_steps, initial=step, unit="step", dynamic_ncols=True,
               disable=not (is_host and sys.stderr.isatty()))
    acc = eval_loss = None
    stopped = False
    epoch_start, epoch_steps, waited = time.perf_counter(), 0, 0.0
    train_start = time.perf_counter()
    while step < total_steps and not stopped:
        if pending is None:
            t = time.perf_counter()
            batch = next(train_it)
            waited += time.perf_counter() - t
        else:
            # The batch already drawn for compilation; the checkpointed iterator state must
            # not advance past it, so save/restore are only at step boundaries below.
            batch, pending = pending, None
        state_r, m = train_c(state_r, steps.shard(batch, ndev), rng)
        step += 1
        epoch_steps += 1
        bar.update(1)
        if should_stop is not None and should_stop(step):
            stopped, acc = True, None  # evaluated below, at the step reached
        if step % config.log_training_steps == 0 or step == total_steps:
            rec = {k: float(v[0]) for k, v in jax.device_get(m).items()}
            rec |= {"step": step, "learning_rate": float(config.lr * sched_fns[0](step - 1))
                    if sched_fns else 0.0}
            writer.write(rec)
            bar.set_postfix(loss=f"{rec['training_loss']:.3f}")
        new_epoch = math.floor(step / steps_per_epoch + 1e-9)
        if new_epoch > epoch or step == total_steps:
            jax.block_until_ready(state_r["step"])
            busy = time.perf_counter() - epoch_start - waited
            meta["train_rates"].append(epoch_steps * global_batch / jax.device_count()
                                       / max(busy, 1e-9))
            epoch = max(new_epoch, epoch + (step == total_steps))
            meta["epoch"] = epoch
            if epoch % config.eval.every_epochs == 0 or step == total_steps:
                acc, eval_loss, rate = evaluate(steps.replicate(
                    _eval_variables(steps.unreplicate(state_r)), ndev))
                meta["infer_rates"].append(rate)
                writer.write({"step": step, "epoch": epoch, "eval_acc": acc,
                              "eval_loss": eval_loss, "im_sec_core_train": meta["train_rates"][-1],
                              "im_sec_core_infer": rate})
                logging.info("epoch %d step %d: eval acc %.4f loss %.4f", epoch, step, acc,
                             eval_loss)
                if callback is not None and step < total_steps:
                    partial = _metrics(acc, eval_loss, meta, compile_seconds,
                                       temp_bytes, peak_bytes, step)
                    stopped = not callback(epoch, partial)
            epoch_start, epoch_steps, waited = time.perf_counter(), 0, 0.0
        if config.ckpt_steps and step % config.ckpt_steps == 0 and step < total_steps:
            save(step)
    bar.close()
    train_seconds = time.perf_counter() - train_start

    # ---------------------------------------------------------------- final
    final = steps.unreplicate(state_r)
    if acc is None:  # resumed after the last step, or no epoch boundary evaluated
        acc, eval_loss, rate = evaluate(steps.replicate(_eval_variables(final), ndev))
        meta["infer_rates"].append(rate)
    if ckpt is not None:
        save(step, force=True)
        ckpt.wait()
        ckpt.close()
    metrics = _metrics(acc, eval_loss, meta, compile_seconds, temp_bytes, peak_bytes, step)
    metrics.train_seconds = train_seconds
    out_vars = _eval_variables(final)
    if eval_perf:
        metrics.num_params = perf.count_params(out_vars["params"])
        metrics.flops = perf.flops_per_example(
            lambda v, x: model.apply(v, x, deterministic=True, training=False),
            out_vars, (inp.image_size, inp.image_size, 3))
    else:
        metrics.im_sec_core_train = metrics.im_sec_core_infer = 0.0
    writer.write({"step": step, "epoch": epoch, "final": metrics.to_dict()})
    return metrics, epoch, {"params": out_vars["params"],
                            "batch_stats": out_vars.get("batch_stats", {})}


def _eval_variables(state: dict[str, Any]) -> dict[str, Any]:
    """The variables evaluated and returned: the EMA when there is one."""
    if state.get("ema"):
        return {"params": state["ema"]["params"], "batch_stats": state["ema"]["batch_stats"]}
    return {"params": {**state["frozen"], **state["params"]},
            "batch_stats": state["batch_stats"]}


def _metrics(acc: float, loss: float, meta: dict[str, Any], compile_seconds: float,
             temp_bytes: int, peak_bytes: int, step: int) -> Metrics:
    def median(xs: list[float]) -> float:
        return float(statistics.median(xs)) if xs else 0.0

    return Metrics(acc=float(acc), loss=float(loss),
                   im_sec_core_train=median(meta["train_rates"]),
                   im_sec_core_infer=median(meta["infer_rates"]),
                   compile_seconds=compile_seconds, train_temp_bytes=temp_bytes,
                   train_peak_bytes=peak_bytes, steps=step)
