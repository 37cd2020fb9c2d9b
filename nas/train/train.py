"""`train_and_eval`: train one candidate, evaluate it, measure its cost.

Reads top to bottom like big_vision's train.py, one named stage at a time:

    config -> data -> trainer (model, inheritance, freezing, optimizer) -> run files ->
    resume -> compile -> step loop (log, eval, callbacks, checkpoints) -> final eval ->
    measurement -> result

The step loop is the only one: each step is handed to a trainer strategy
(`nas.train.trainers`: standard data-parallel, or the reversible CPU-offload trainer), which
is chosen in `nas.train.memory` (a candidate over the device budget that is not
reversible is rejected there, before any data is read). Everything random derives from
`config.seed` and the step number, and the data position is checkpointed (or is a
function of the step, for a device-resident dataset), so a run killed at any point and
resumed ends with the same parameters as one that never stopped.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from tqdm import tqdm

from nas.io import examples
from nas.train import compilation, custom, devdata, distributed, memory, optim, perf, trainers
from nas.train import config as config_lib
from nas.train import data as data_lib
from nas.train import mesh as mesh_lib
from nas.train.checkpoint import Checkpointer, has_checkpoint
from nas.train.feeds import DeviceDataCache, DeviceFeed, HostFeed
from nas.train.options import Refit as Refit
from nas.train.options import ShouldStop as ShouldStop
from nas.train.options import TrainOptions
from nas.train.perf import Metrics

Callback = Callable[[int, Metrics], bool]


def build_graph(model_name: str, num_classes: int, image_size: int,
                model: Any = None) -> tuple[Any, Any]:
    """(graph, constants) of a zoo model named in the config; `model`: the config's extra
    builder arguments (`train.model`)."""
    from nas import zoo

    if hasattr(model, "to_dict"):
        model = model.to_dict()
    graph, constants, _ = zoo.build(model_name, num_classes, image_size, model)
    return graph, constants


class JsonlWriter:
    """Appends one JSON object per line to `<workdir>/metrics.jsonl` (host 0 only), and
    hands each to `on_record` (`TrainOptions.on_record`) too."""

    def __init__(self, workdir: str | None, enabled: bool,
                 on_record: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.path = os.path.join(workdir, "metrics.jsonl") if workdir and enabled else None
        self.on_record = on_record if enabled else None

    def write(self, record: dict[str, Any]) -> None:
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.on_record is not None:
            self.on_record(record)


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass
class Data:
    """What the loop needs to know about the data, and where batches come from."""

    feed: Any  # HostFeed or DeviceFeed
    eval_data: data_lib.EvalData
    n_train: int
    global_batch: int
    local_batch: int
    steps_per_epoch: float
    total_steps: int
    mesh: mesh_lib.Mesh  # the devices the batch is split over (all processes)
    test_data: data_lib.EvalData | None = None  # eval.test_split: reported, never decided on


def setup_data(config: ml_collections.ConfigDict, on_device_ok: bool,
               cache: DeviceDataCache | None, mesh: mesh_lib.Mesh | None = None) -> Data:
    """Open the train source once (this host's share), choose the feed, build eval data.
    `mesh`: the devices the batch is split over (default: the config's `mesh_shape`)."""
    inp = config.input
    mesh = mesh if mesh is not None else mesh_lib.from_config(config)
    devices, local_devices = mesh_lib.size(mesh), mesh_lib.local_devices(mesh)
    data_dir = data_lib.resolve_data_dir(inp.data_dir or None)
    global_batch = inp.batch_size
    if global_batch % devices:
        raise ValueError(f"config field 'input.batch_size': {global_batch} is not divisible "
                         f"by the {devices} devices")
    local_batch = global_batch // jax.process_count()
    pc, pi = jax.process_count(), jax.process_index()
    source = data_lib.split_source(inp, inp.data.split, data_dir, pi, pc)
    n_train = len(source) * pc  # even splits: every host holds about the same share
    limit = int(inp.get("device_data_bytes", 0))
    # With several processes each host's share may differ by an example, and the shares
    # of one global array may not: those runs read through grain.
    use_device = (on_device_ok and limit > 0 and pc == 1 and devdata.supported(inp.data.name)
                  and (size := devdata.nbytes(source, inp.data.name, inp.image_size,
                                              inp.channels)) <= limit)
    if use_device:
        if len(source) < local_batch:
            raise ValueError(f"config field 'input.batch_size': {local_batch} per host "
                             f"exceeds the {len(source)} training examples")
        key = (inp.data.name, inp.data.split, inp.data.validation_fraction,
               inp.data.get("folds", 0), inp.data.get("fold", 0),
               inp.data.get("fold_seed", 0), data_dir,
               inp.image_size, inp.channels, config.seed, pi, pc,
               tuple(d.id for d in local_devices), bool(inp.augment))

        # Room for the whole split where it fits: the search's training part of it, each
        # finals fold and the retrain taken home then compile one train step between them.
        whole = len(data_lib.open_source(inp.data.name, inp.data.split, data_dir))
        fits = size * whole <= limit * len(source)

        def load() -> devdata.DeviceData:
            dd = devdata.load(source, inp.data.name, inp.image_size, config.seed, mesh,
                              inp.channels, rows=whole if fits else 0)
            if not inp.augment:
                dd.pad, dd.flip = 0, False
            return dd

        dd = cache.get(key, load) if cache is not None else load()
        feed: Any = DeviceFeed(dd, local_batch)
    else:
        feed = HostFeed(data_lib.make_train_dataset(
            source, data_lib.make_preprocess(inp.data.name, True, inp.image_size, inp.augment,
                                             inp.channels),
            local_batch_size=local_batch, seed=config.seed,
            shuffle=inp.shuffle_buffer_size > 0, num_threads=inp.num_threads,
            prefetch=inp.prefetch))
    steps_per_epoch = n_train / global_batch
    total_steps = config_lib.total_steps(config, steps_per_epoch)
    eval_data = data_lib.make_eval_data(inp.data.name, config.eval.data.split, data_dir,
                                        inp.image_size, config.eval.batch_size,
                                        len(local_devices), inp=inp)
    test_data = None
    if config.eval.test_split:
        test_data = data_lib.make_eval_data(inp.data.name, config.eval.test_split, data_dir,
                                            inp.image_size, config.eval.batch_size,
                                            len(local_devices), inp=inp)
    logging.info("%d train examples (%s), global batch %d on %d devices, %d steps "
                 "(%.2f per epoch)", n_train, "on the devices" if use_device else "grain",
                 global_batch, devices, total_steps, steps_per_epoch)
    return Data(feed, eval_data, n_train, global_batch, local_batch, steps_per_epoch,
                total_steps, mesh, test_data)


# ----------------------------------------------------------------------------- trainer


def _init_variables(model: Any, shape: tuple[int, ...], seed: int,
                    parent: dict[str, Any]) -> dict[str, Any]:
    """The model's variables as plain dicts: `parent`'s arrays when they already cover every
    op (a search's children arrive complete from the driver: tracing is enough to check),
    else a fresh initialization on the host CPU (never twice on an accelerator)."""
    cpu = jax.local_devices(backend="cpu")[0]
    x = np.zeros((1, *shape), np.float32)

    def init(rng: jax.Array) -> Any:
        return model.init({"params": rng, "dropout": rng}, x)

    with jax.default_device(cpu):
        rng = jax.random.PRNGKey(seed)
        matched = {k: _inherit(dict(v), parent.get(k))
                   for k, v in jax.eval_shape(init, rng).items()}
        if all(names == set(merged) for merged, names in matched.values()):
            return {k: jax.tree.map(np.asarray, merged) for k, (merged, _) in matched.items()}
        variables = jax.jit(init)(rng)
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


def setup_trainer(config: ml_collections.ConfigDict, data: Data, reversible: bool,
                  options: TrainOptions) -> Any:
    """The model's initial (inherited, partly frozen) variables inside a trainer strategy:
    `options.graph` from `options.init_variables`, `freeze` and `freeze_inherited` applied."""
    from nas.graph import Model

    graph, constants, functions = options.graph, options.constants, options.functions
    model = Model(graph, constants)
    size = config.input.image_size
    parent = dict(options.init_variables or {})
    sched_kw = dict(total_steps=data.total_steps, steps_per_epoch=data.steps_per_epoch,
                    global_batch_size=data.global_batch)
    # The reversible trainer initializes layer by layer itself unless there is a parent.
    fresh = (_init_variables(model, config_lib.image_shape(config), config.seed, parent)
             if not reversible or parent.get("params") else None)
    params, inherited = _inherit(fresh["params"], parent.get("params")) if fresh else ({}, set())
    frozen_names = set(options.freeze) | (inherited if options.freeze_inherited else set())
    unknown = frozen_names - set(params) if fresh else set()
    if unknown:
        raise ValueError(f"freeze: ops {sorted(unknown)} have no parameters in this graph")
    logging.info("%s trainer; %d ops inherited, %d frozen", "reversible" if reversible
                 else "standard", len(inherited), len(frozen_names))
    if reversible:
        custom.refuse_reversible(functions or {})
        return trainers.ReversibleStrategy(graph, constants, config, image_size=size,
                                           sched_kw=sched_kw, params=params or None,
                                           frozen_names=frozen_names, mesh=data.mesh)
    batch_stats, _ = _inherit(fresh.get("batch_stats", {}), parent.get("batch_stats"))
    per_device = max(1, config.input.batch_size // mesh_lib.size(data.mesh))
    bn_batches = (data_lib.plain_batches(config.input, config.precise_bn_batches, per_device,
                                         config.seed)
                  if batch_stats and config.precise_bn_batches else ())
    return trainers.StandardTrainer(
        model, config, params={k: v for k, v in params.items() if k not in frozen_names},
        frozen={k: v for k, v in params.items() if k in frozen_names},
        batch_stats=batch_stats, sched_kw=sched_kw,
        device_data=data.feed.device_data if data.feed.on_device else None,
        bn_batches=bn_batches, eval_rows=data.eval_data.batch_size, functions=functions,
        mesh=data.mesh)


# ----------------------------------------------------------------------------- run files


def write_run_files(workdir: str, config: ml_collections.ConfigDict, graph: Any,
                    constants: Any) -> None:
    """config.json and graph.json via temp-then-rename, so readers never see half a file."""
    from nas.graph.serialize import graph_to_json

    os.makedirs(workdir, exist_ok=True)
    for name, text in (("config.json", config.to_json(indent=2)),
                       ("graph.json", graph_to_json(graph, constants))):
        tmp = os.path.join(workdir, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(workdir, name))


def resume(ckpt: Checkpointer | None, trainer: Any, feed: Any) -> dict[str, Any]:
    """Restore the latest checkpoint into the trainer and the feed; return its meta."""
    meta: dict[str, Any] = {"train_rates": [], "infer_rates": [], "epoch": 0}
    if ckpt is not None and ckpt.latest_step() is not None:
        current = trainer.state()
        state, meta = ckpt.restore(current, older=optim.before_run_lengths)
        trainer.load_state(optim.with_run_lengths(state, current))
        feed.set_state(meta.get("data", {}))
        logging.info("Resumed from step %d in %s", int(state["step"]), ckpt.directory)
    return meta


# ----------------------------------------------------------------------------- the loop


@dataclasses.dataclass
class Timings:
    compile: float = 0.0
    overlap: float = 0.0  # of `compile`, while the starting variables were being refitted
    steps: float = 0.0  # step loop, without eval and checkpoints
    wait: float = 0.0  # inside `steps`: waiting for input
    eval: float = 0.0
    checkpoint: float = 0.0


def evaluate(trainer: Any, eval_data: data_lib.EvalData) -> tuple[float, float, float]:
    """(accuracy, mean loss, images/sec/device of the eval steps alone)."""
    return evaluate_examples(trainer, eval_data)[:3]


def evaluate_examples(trainer: Any, eval_data: data_lib.EvalData
                      ) -> tuple[float, float, float, np.ndarray | None]:
    """`evaluate`, and which examples were right, in the split's order (the same for
    every candidate: eval data is read unshuffled, padding rows dropped); None with
    several hosts, where each host sees only its share."""
    run = trainer.eval_fn()
    correct = loss = count = busy = 0.0
    rows: list[np.ndarray] = []
    for batch in eval_data:
        t = time.perf_counter()
        c, s, n, bits = run(batch)
        busy += time.perf_counter() - t
        correct, loss, count = correct + c, loss + s, count + n
        rows.append(bits)
    if jax.process_count() == 1 and int(count) != eval_data.num_examples:
        raise RuntimeError(f"eval saw {count} examples, expected {eval_data.num_examples}")
    rate = (eval_data.batch_size * eval_data.num_batches / max(busy, 1e-9)
            / trainer.ndev)
    per_example = np.concatenate(rows) if jax.process_count() == 1 and rows else None
    return correct / max(count, 1.0), loss / max(count, 1.0), rate, per_example


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _metrics(acc: float, loss: float, meta: dict[str, Any], timings: Timings,
             memory: tuple[int, int], step: int) -> Metrics:
    return Metrics(acc=float(acc), loss=float(loss),
                   im_sec_core_train=_median(meta["train_rates"]),
                   im_sec_core_infer=_median(meta["infer_rates"]),
                   compile_seconds=timings.compile, refit_overlap_seconds=timings.overlap,
                   train_temp_bytes=memory[0],
                   train_peak_bytes=memory[1], steps=step, train_seconds=timings.steps,
                   input_wait_seconds=timings.wait, eval_seconds=timings.eval,
                   checkpoint_seconds=timings.checkpoint)


def compile_steps(trainer: Any, data: Data, end: int) -> tuple[Any, float]:
    """(the first batch to train on, seconds spent compiling the train and eval steps on
    its shapes); (None, 0) when no step is left."""
    step = int(np.asarray(trainer.state()["step"]))
    if step >= end:
        return None, 0.0
    pending = data.feed.next(step)
    seconds = trainer.compile(pending, next(iter(data.eval_data)))
    temp, peak = trainer.memory()
    logging.info("compiled in %.1fs; train step temp %.1f MiB, peak %.1f MiB per device",
                 seconds, temp / 2**20, peak / 2**20)
    return pending, seconds


def refit_while_compiling(trainer: Any, data: Data, end: int, refit: Refit | None,
                          timings: Timings) -> Any:
    """Compile the steps while `refit` changes the starting variables' values (a search
    child's new ops fitted to its parent): the compiled steps only depend on shapes.

    On the CPU the steps start compiling once the refit calls `built()` (its own programs
    are built, it runs them now) or returns: tracing holds Python's lock, so tracing both
    at once only delays the refit's running (README child, 2 cores: 1.53-1.64 -> 1.36-1.44
    s per child outside training). On an accelerator they start at once: there the fit's
    programs compile for long (autotuning) and were measured hidden inside the steps'
    compile (H200); docs/benchmarks.md. Returns the first batch (`compile_steps`)."""
    if refit is None:
        pending, timings.compile = compile_steps(trainer, data, end)
        return pending
    start = time.perf_counter()
    built = threading.Event()
    if jax.default_backend() != "cpu":
        built.set()

    def compile_once_built() -> tuple[Any, float]:
        built.wait()
        return compile_steps(trainer, data, end)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="compile") as pool:
        compiling = pool.submit(compile_once_built)
        try:
            trainer.set_starting_variables(refit(trainer.starting_variables(), built.set))
            refit_seconds = time.perf_counter() - start
        finally:
            built.set()
            pending, timings.compile = compiling.result()
    timings.overlap = max(0.0, timings.compile + refit_seconds - (time.perf_counter() - start))
    return pending


def run_loop(config: ml_collections.ConfigDict, trainer: Any, data: Data, meta: dict,
             ckpt: Checkpointer | None, writer: JsonlWriter, timings: Timings,
             callback: Callback | None, end: int, pending: Any, options: TrainOptions
             ) -> tuple[int, int, float | None, float | None, np.ndarray | None]:
    """Step from `pending` (the first batch, None when no step is left) until `end` or a
    stop (`callback`, `options.should_stop`); returns (step, epoch, acc, loss, the last
    evaluation's per-example bits). The schedule always spans total_steps, so a run
    stopped before it and resumed later continues exactly where an unbroken run would be.
    `options.progress` shows the step bar (None: only when stderr is a terminal)."""
    step = int(np.asarray(trainer.state()["step"]))
    epoch = int(meta["epoch"])
    feed = data.feed

    def save(force: bool = False) -> None:
        if ckpt is not None:
            t = time.perf_counter()
            ckpt.save(step, trainer.state(), dict(meta, data=feed.get_state()), force=force)
            timings.checkpoint += time.perf_counter() - t

    should_stop = options.should_stop
    shown = sys.stderr.isatty() if options.progress is None else options.progress
    bar = tqdm(total=data.total_steps, initial=step, unit="step", dynamic_ncols=True,
               disable=not (jax.process_index() == 0 and shown))
    acc = loss = per_example = None
    stopped = False
    segment_start, segment_steps, waited = time.perf_counter(), 0, 0.0
    while step < end and not stopped:
        if pending is None:
            t = time.perf_counter()
            batch = feed.next(step)
            waited += time.perf_counter() - t
        else:  # the batch drawn to compile; the saved feed state is already past it
            batch, pending = pending, None
        m = trainer.train_step(batch)
        step += 1
        segment_steps += 1
        if trainer.lazy_compile and segment_steps == 1 and timings.compile == 0.0:
            trainer.sync()  # this first step compiled: time it as compilation, not a step
            timings.compile = time.perf_counter() - segment_start - waited
            segment_start, segment_steps, waited = time.perf_counter(), 0, 0.0
        bar.update(1)
        if step % config.log_training_steps == 0 or step == end:
            rec = trainer.host_metrics(m) | {"step": step,
                                             "learning_rate": config.lr
                                             * trainer.learning_rate(step)}
            writer.write(rec)
            bar.set_postfix(loss=f"{rec['training_loss']:.3f}")
        stopped = bool(should_stop is not None and should_stop(step))
        new_epoch = math.floor(step / data.steps_per_epoch + 1e-9)
        last = step >= end or stopped
        if new_epoch > epoch or last:
            trainer.sync()
            busy = time.perf_counter() - segment_start
            timings.steps += busy
            timings.wait += waited
            meta["train_rates"].append(segment_steps * data.global_batch
                                       / mesh_lib.size(data.mesh)
                                       / max(busy - waited, 1e-9))
            epoch = max(new_epoch, epoch + (step == data.total_steps))
            meta["epoch"] = epoch
            if epoch % config.eval.every_epochs == 0 or last:
                acc, loss, per_example = _evaluate_epoch(trainer, data, meta, timings, writer,
                                                         step, epoch)
                if callback is not None and not last:
                    partial = _metrics(acc, loss, meta, timings, trainer.memory(), step)
                    stopped = not callback(epoch, partial)
            segment_start, segment_steps, waited = time.perf_counter(), 0, 0.0
        if config.ckpt_steps and step % config.ckpt_steps == 0 and step < end:
            t = time.perf_counter()
            save()
            segment_start += time.perf_counter() - t  # checkpoint time is not step time
    bar.close()
    if ckpt is not None and ckpt.latest_step() != step:  # resumed after the last step: saved
        save(force=True)  # written in the background: `finish_checkpoints` waits for it
    return step, epoch, acc, loss, per_example



def _evaluate_epoch(trainer: Any, data: Data, meta: dict, timings: Timings,
                    writer: JsonlWriter, step: int, epoch: int
                    ) -> tuple[float, float, np.ndarray | None]:
    """`run_loop`'s evaluation at an epoch's end: (acc, loss, per-example bits), its
    inference rate kept in `meta` and the epoch's line written."""
    t = time.perf_counter()
    acc, loss, rate, per_example = evaluate_examples(trainer, data.eval_data)
    timings.eval += time.perf_counter() - t
    meta["infer_rates"].append(rate)
    writer.write({"step": step, "epoch": epoch, "accuracy": acc, "loss": loss,
                  "im_sec_core_train": meta["train_rates"][-1],
                  "im_sec_core_infer": rate})
    logging.info("epoch %d step %d: eval acc %.4f loss %.4f", epoch, step, acc, loss)
    return acc, loss, per_example


def start_accuracy(trainer: Any, data: Data, meta: dict[str, Any], timings: Timings) -> None:
    """The eval accuracy of the starting weights, before the first step, into `meta`
    (which checkpoints keep); not measured again by a run resumed past step 0."""
    if "start_acc" in meta or int(np.asarray(trainer.state()["step"])) > 0:
        return
    t = time.perf_counter()
    meta["start_acc"] = float(evaluate(trainer, data.eval_data)[0])
    timings.eval += time.perf_counter() - t


class PoorStartError(ValueError):
    """The starting weights score below `TrainOptions.min_start_accuracy`: a search's child
    that cannot start near its parent, so it is not trained (`search.max_start_drop`)."""


def check_start(meta: dict[str, Any], low: float | None) -> None:
    """Raises `PoorStartError` when the measured start accuracy is below `low`."""
    start = meta.get("start_acc")
    if low is not None and start is not None and float(start) < low:
        raise PoorStartError(f"its validation accuracy at its start, {float(start):.3f}, is "
                             f"below {low:.3f} (its parent's less search.max_start_drop): it "
                             f"cannot start near its parent, so it is not trained")


def finish_checkpoints(ckpt: Checkpointer | None, timings: Timings) -> None:
    """Waits for the checkpoints still being written, after the device stage."""
    if ckpt is not None:
        t = time.perf_counter()
        ckpt.wait()
        ckpt.close()
        timings.checkpoint += time.perf_counter() - t


# ----------------------------------------------------------------------------- entry point


def train_and_eval(
    config: ml_collections.ConfigDict,
    eval_perf: bool = True,
    callback: Callback | None = None,
    *,
    options: TrainOptions | None = None,
) -> tuple[Metrics, int, dict[str, Any]]:
    """Train `options.graph` (or the config's zoo model); return (metrics, epochs, state).

    callback(epoch, metrics) -> bool is called after each eval; False stops early (the
    candidate is then evaluated and its metrics, with `steps` trained, returned).
    options: how the run goes (`TrainOptions`: the graph, a workdir to resume, a parent's
      variables to inherit, freezing, stops, a refit, a device stage...); None: defaults.
    state: {"params", "batch_stats"} (the EMA of them when ema_decay > 0).
    """
    if options is None:
        options = TrainOptions()
    elif not isinstance(options, TrainOptions):
        raise ValueError(f"train_and_eval: options: expected a TrainOptions, got {options!r}")
    if "train" in config:  # a search config: its `train` part trains one candidate
        config = config.train
    config = config_lib.with_defaults(config)
    distributed.check_joined(config)
    trainers.compute_dtype(config)  # a bad value fails before any data is read
    config = data_lib.with_num_classes(config)  # 0: the data's; disagreeing: one line
    options = dataclasses.replace(
        options, functions=custom.train_functions(config, options.functions))
    compilation.enable_cache(config.compilation_cache_dir)
    with compilation.CompileCounter() as counter:
        metrics, epoch, state = _train_and_eval(config, eval_perf, callback, options)
    metrics.compilations, metrics.compile_cache_hits = counter.compiles, counter.cache_hits
    logging.info("%d compilations, %d persistent cache hits; compiled: %s", counter.compiles,
                 counter.cache_hits, ", ".join(counter.compiled) or "nothing")
    return metrics, epoch, state


def _train_and_eval(config: ml_collections.ConfigDict, eval_perf: bool,
                    callback: Callback | None, options: TrainOptions,
                    ) -> tuple[Metrics, int, dict[str, Any]]:
    """The stages, top to bottom (see the module docstring)."""
    start = time.perf_counter()
    options, reversible = _settle(config, options)
    graph, constants, workdir = options.graph, options.constants, options.workdir
    writer = JsonlWriter(workdir, jax.process_index() == 0, options.on_record)
    data = setup_data(config, on_device_ok=not reversible, cache=options.device_data_cache)
    trainer = setup_trainer(config, data, reversible, options)
    if workdir and jax.process_index() == 0:
        write_run_files(workdir, config, graph, constants)
    ckpt = Checkpointer(workdir, keep=config.keep_ckpts) if workdir else None
    meta = resume(ckpt, trainer, data.feed)
    timings = Timings()
    setup_seconds = time.perf_counter() - start

    stop_epochs = options.stop_epochs
    end = (data.total_steps if stop_epochs is None else
           min(data.total_steps, max(1, int(data.steps_per_epoch * float(stop_epochs)))))
    pending = refit_while_compiling(trainer, data, end, options.refit, timings)
    waiting = time.time()
    with options.device_stage or contextlib.nullcontext():
        started = time.time()
        if options.evaluate_start:
            start_accuracy(trainer, data, meta, timings)
            check_start(meta, options.min_start_accuracy)
        step, epoch, acc, loss, per_example = run_loop(
            config, trainer, data, meta, ckpt, writer, timings, callback, end, pending,
            options)
        if acc is None:  # resumed after the last step: evaluate the restored weights
            t = time.perf_counter()
            acc, loss, rate, per_example = evaluate_examples(trainer, data.eval_data)
            timings.eval += time.perf_counter() - t
            meta["infer_rates"].append(rate)
        test = None
        if data.test_data is not None:  # once, at the end: for the report only
            t = time.perf_counter()
            test = evaluate_examples(trainer, data.test_data)
            timings.eval += time.perf_counter() - t
        out_vars = jax.block_until_ready(trainer.variables())
        finished = time.time()
    finish_checkpoints(ckpt, timings)

    metrics = _metrics(acc, loss, meta, timings, trainer.memory(), step)
    metrics.start_acc = float(meta.get("start_acc", -1.0))
    metrics.setup_seconds = setup_seconds
    metrics.eval_examples = data.eval_data.num_examples
    metrics.device_wait_seconds = started - waiting
    metrics.device_started_at, metrics.device_finished_at = started, finished
    if per_example is not None:
        metrics.eval_correct = examples.to_text(per_example)
    if test is not None:
        _add_test(metrics, test, data.test_data.num_examples)
    if eval_perf:
        _add_costs(metrics, out_vars, graph, constants, config)
    else:
        metrics.im_sec_core_train = metrics.im_sec_core_infer = 0.0
    writer.write({"step": step, "epoch": epoch, "final": metrics.record()})
    return metrics, epoch, {"params": out_vars["params"],
                            "batch_stats": out_vars.get("batch_stats", {})}


def _settle(config: ml_collections.ConfigDict, options: TrainOptions
            ) -> tuple[TrainOptions, bool]:
    """(`options` as the run uses them, whether the candidate takes the reversible trainer):
    the config's zoo model built when no graph is given, and the refit dropped when
    resuming (the checkpoint holds the variables) or run at once for a reversible
    candidate (its steps compile lazily: there is nothing to overlap it with)."""
    if options.graph is None:
        graph, constants = build_graph(config.model_name, config.num_classes,
                                       config.input.image_size, config.get("model"))
        options = dataclasses.replace(options, graph=graph, constants=constants)
    reversible = memory.select_trainer(config, options.graph, options.constants) == "reversible"
    if options.workdir and has_checkpoint(options.workdir):
        options = dataclasses.replace(options, refit=None)
    if options.refit is not None and reversible:
        starting = options.refit(dict(options.init_variables or {}), lambda: None)
        options = dataclasses.replace(options, init_variables=starting, refit=None)
    return options, reversible


def _add_test(metrics: Metrics, test: tuple[Any, ...], examples_count: int) -> None:
    """The test split's accuracy, loss and per-example results (reported only)."""
    metrics.test_acc, metrics.test_loss, _, test_bits = test
    if math.isnan(metrics.test_loss):  # the loss reads extras the test split lacks
        metrics.test_loss = -1.0  # not measured (`steps.make_eval_step`)
    metrics.test_examples = examples_count
    if test_bits is not None:
        metrics.test_correct = examples.to_text(test_bits)


def _add_costs(metrics: Metrics, out_vars: Any, graph: Any, constants: Any,
               config: ml_collections.ConfigDict) -> None:
    """Parameters and FLOPs per example of the trained model."""
    t = time.perf_counter()
    metrics.num_params = perf.count_params(out_vars["params"])
    model = _apply_model(graph, constants)
    metrics.flops = perf.flops_per_example(model, out_vars, config_lib.image_shape(config))
    metrics.measure_seconds = time.perf_counter() - t


def _apply_model(graph: Any, constants: Any) -> Callable[..., Any]:
    """The inference function whose FLOPs are counted (the same for every trainer)."""
    from nas.graph import Model

    model = Model(graph, constants)
    return lambda v, x: model.apply(v, x, deterministic=True, training=False)
