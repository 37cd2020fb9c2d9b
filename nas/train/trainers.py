"""The two ways to run the step loop of `train_and_eval`: standard and reversible.

Why: `train_and_eval` sets up once what every candidate needs (data, inheritance, resume,
evaluation, measurement, checkpoints, callbacks) and hands each step to a trainer strategy.
Both strategies answer the same small protocol, so the loop in `train.py` is the only loop:

    compile(batch, eval_batch) -> seconds      ahead-of-time compilation (0 if lazy)
    lazy_compile                               True: the first step compiles (and is timed
                                               as compilation, not as a step)
    memory() -> (temp bytes, peak bytes)       of one train step, per device
    train_step(batch) -> metrics               may return device values (not synced)
    host_metrics(metrics) -> {name: float}
    eval_fn() -> (batch -> correct, loss, count sums, per-example right/wrong bits of
                 the batch's real rows in order)    for the current weights
    variables() -> {"params", "batch_stats"}   numpy, what is evaluated and returned
                                               (batch-norm statistics recomputed for the
                                               current weights when given batches)
    state() / load_state(tree)                 checkpointable numpy tree (with "step")
    sync()                                      wait for queued device work
    ndev                                        this process's devices (rates are per device)

  and, where compile() is not lazy (so a search's fit can run while it compiles):

    starting_variables() / set_starting_variables(v)   before the first step, same shapes

* `StandardTrainer`: the whole model's state replicated on every device of a mesh
  (`nas.train.mesh`), one jitted step with the batch split along its data axis (gradients
  averaged over devices); the batch comes from the host (grain) or is drawn from a
  device-resident dataset inside the step (`nas.train.devdata`).
* `ReversibleStrategy`: `nas.train.reversible.ReversibleTrainer` (weights and optimizer
  state in host memory, one compiled program per step), through its public API only.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nas.train import compilation, optim, perf, precise_bn, steps
from nas.train import mesh as mesh_lib

EvalFn = Callable[[Mapping[str, np.ndarray]], tuple[float, float, float, np.ndarray]]


def real_rows(bits: np.ndarray, batch: Mapping[str, np.ndarray]) -> np.ndarray:
    """The per-example bits of a batch's real rows (its `mask`), padding dropped."""
    mask = np.asarray(batch["mask"]).reshape(-1) > 0
    return np.asarray(bits).reshape(-1)[mask].astype(bool)


def compute_dtype(config: Any) -> Any:
    """The config's `compute_dtype` as a jnp dtype (float32 when absent)."""
    name = config.get("compute_dtype", "float32") or "float32"
    if name not in ("float32", "bfloat16"):
        raise ValueError(f"config field 'compute_dtype' must be 'float32' or 'bfloat16', "
                         f"got {name!r}")
    return jnp.dtype(name)


class StandardTrainer:
    """Data-parallel training of the whole model on a mesh (default: every device)."""

    lazy_compile = False  # compile() builds the steps ahead of the first one

    def __init__(self, model: Any, config: Any, *, params: dict[str, Any],
                 frozen: dict[str, Any], batch_stats: dict[str, Any], sched_kw: Mapping,
                 frozen_names: Iterable[str] = (), device_data: Any = None,
                 bn_batches: Sequence[np.ndarray] = (), eval_rows: int = 0,
                 functions: Mapping[str, Callable[..., Any]] | None = None,
                 mesh: mesh_lib.Mesh | None = None) -> None:
        functions = functions or {}
        self.model = model
        self.mesh = mesh if mesh is not None else mesh_lib.from_config(config)
        self.ndev = mesh_lib.local_size(self.mesh)  # this process's devices
        self.num_classes = int(config.num_classes)
        self.dtype = compute_dtype(config)
        self.tx, self.sched_fns = optim.make(config, params, sched_kw,
                                             optimizer=functions.get("optimizer"))
        del frozen_names  # frozen params are split off by the caller: no optimizer state
        self.device_data = device_data
        self.seed = int(config.seed)
        self.ema = bool(config.ema_decay)
        self._state_r: Any = self._replicate(self._initial_state(params, frozen, batch_stats))
        self.rng = self._replicate(np.asarray(jax.random.PRNGKey(config.seed)))
        fn = steps.make_train_step(model, self.tx, self.num_classes,
                                   ema_decay=config.ema_decay,
                                   ema_warmup_steps=config.ema_warmup_steps,
                                   compute_dtype=self.dtype,
                                   loss_fn=functions.get("loss"),
                                   augment_fn=functions.get("augment"))
        if device_data is not None:
            fn = steps.with_device_data(fn, device_data.augment_fn(), self.seed)
        self._train = steps.train_program(fn, self.mesh, device_data is not None)
        # Precise BN: the eval program computes the statistics of `bn_batches` (one per
        # device share of an eval-shaped batch of `eval_rows`), so it is not compiled apart.
        self._momenta = precise_bn.recomputable(model.graph)
        self.bn_batches = list(bn_batches) if self._momenta else []
        rows = eval_rows or (len(self.bn_batches[0]) * self.ndev if self.bn_batches else 0)
        self._statistics_batches = precise_bn.eval_shaped(self.bn_batches, self.ndev, rows)
        self._eval = steps.eval_program(steps.make_eval_step(
            model, self.num_classes, self.dtype,
            statistics_rows=min(len(self.bn_batches[0]), rows // self.ndev)
            if self.bn_batches else 0, loss_fn=functions.get("loss")), self.mesh)
        self._flags = {use: self._replicate(np.asarray(use)) for use in (False, True)}
        self._train_c = self._eval_c = None
        self._eval_keys: set[str] = set()
        self._memory = (0, 0)
        self._local_batch = 0
        self._precise: tuple[int, dict[str, Any]] | None = None  # (step, variables)

    def _replicate(self, tree: Any) -> Any:
        return mesh_lib.put_replicated(tree, self.mesh)

    def _shard(self, batch: Any) -> Any:
        return mesh_lib.put_sharded(dict(batch), self.mesh)

    def _initial_state(self, params: dict[str, Any], frozen: dict[str, Any],
                       batch_stats: dict[str, Any]) -> dict[str, Any]:
        return {
            "params": params,
            "frozen": frozen,
            "batch_stats": batch_stats,
            "opt_state": optim.init_state(self.tx, params),
            "ema": ({"params": {**frozen, **params}, "batch_stats": batch_stats}
                    if self.ema else {}),
            "step": np.int32(0),
        }

    def starting_variables(self) -> dict[str, Any]:
        """{"params", "batch_stats"} the first step starts from (numpy)."""
        s = self.state()
        return {"params": {**s["frozen"], **s["params"]}, "batch_stats": s["batch_stats"]}

    def set_starting_variables(self, variables: Mapping[str, Any]) -> None:
        """New values, same names and shapes, for the variables before the first step (the
        compiled steps stay valid): e.g. a search child's fitted new ops."""
        s = self.state()
        if int(s["step"]) != 0:
            raise ValueError(f"set_starting_variables: the trainer is at step {int(s['step'])}")
        params, stats = dict(variables["params"]), dict(variables.get("batch_stats") or {})

        def layout(tree: Any) -> Any:
            return jax.tree.map(lambda a: (np.shape(a), np.asarray(a).dtype), tree)

        if layout({"params": params, "batch_stats": stats}) != layout(
                {"params": {**s["frozen"], **s["params"]}, "batch_stats": s["batch_stats"]}):
            raise ValueError("set_starting_variables: expected the trainer's variable names, "
                             "shapes and dtypes")
        self._state_r = self._replicate(self._initial_state(
            {k: params[k] for k in s["params"]}, {k: params[k] for k in s["frozen"]}, stats))
        self._precise = None

    # ------------------------------------------------------------------ compile
    def _args(self, batch: Any) -> tuple:
        if self.device_data is not None:
            return (self.device_data.arrays, mesh_lib.put_sharded(batch, self.mesh), self.rng)
        return (self._shard(batch), self.rng)

    def compile(self, batch: Any, eval_batch: Mapping[str, np.ndarray]) -> float:
        """Compile the train and eval steps once, on the first batches' shapes (the eval
        step also computes the batch-norm statistics evaluations recompute, else the first
        evaluation would compile them while holding the device). On an accelerator the
        programs compile on threads of their own (docs/benchmarks.md); on the CPU the cores
        that compile are the ones that train, and threads measured slower: one thread
        there."""
        t = time.perf_counter()
        self._eval_keys = set(eval_batch)
        self._statistics_batches = [  # the eval batch's extras (zeros): its program
            ({**{k: np.zeros((len(b["label"]), *np.shape(v)[1:]), np.asarray(v).dtype)
                 for k, v in eval_batch.items() if k not in b}, **b}, n)
            for b, n in self._statistics_batches]
        eval_vars = self._replicate(self._trained_variables())
        jobs = [lambda: self._train.lower(self._state_r, *self._args(batch)).compile(
                    compiler_options=compilation.gradient_options()),
                lambda: self._eval.lower(eval_vars, self._shard(eval_batch),
                                         self._flags[False]).compile()]
        threads = 1 if jax.default_backend() == "cpu" else len(jobs)
        with concurrent.futures.ThreadPoolExecutor(threads, "compile") as pool:
            self._train_c, self._eval_c = [f.result() for f in [pool.submit(j) for j in jobs]]
        self._memory = perf.memory_bytes(self._train_c)
        return time.perf_counter() - t

    def memory(self) -> tuple[int, int]:
        return self._memory

    # ------------------------------------------------------------------ steps
    def train_step(self, batch: Any) -> Any:
        self._state_r, metrics = self._train_c(self._state_r, *self._args(batch))
        return metrics

    def host_metrics(self, metrics: Any) -> dict[str, float]:
        return {k: float(v) for k, v in mesh_lib.to_host(metrics).items()}

    def sync(self) -> None:
        jax.block_until_ready(self._state_r["step"])

    def _evaluate(self, variables_r: Any, batch: Mapping[str, np.ndarray], use_batch: bool
                  ) -> dict[str, Any]:
        """The eval program's outputs (host arrays: per-device values one row per device
        of this process, per-example bits this process's rows in order)."""
        # Not compiled ahead when a resumed run had no step left to train; a split without
        # the validation split's extras (the test split) is traced for its own batches.
        compiled = self._eval_c is not None and set(batch) == self._eval_keys
        step_fn = self._eval_c if compiled else self._eval
        out = step_fn(variables_r, self._shard(batch), self._flags[use_batch])
        return mesh_lib.to_host(out)

    def eval_fn(self) -> EvalFn:
        variables_r = self._replicate(self.variables())

        def run(batch: Mapping[str, np.ndarray]) -> tuple[float, float, float, np.ndarray]:
            out = self._evaluate(variables_r, batch, False)
            return (float(out["correct"]), float(out["loss"]), float(out["count"]),
                    real_rows(out["per_example"], batch))

        return run

    def learning_rate(self, step: int) -> float:
        return optim.learning_rate(self.sched_fns, step)

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        return mesh_lib.to_host(self._state_r)

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._state_r = self._replicate(dict(state))
        self._precise = None

    def _trained_variables(self) -> dict[str, Any]:
        """The trained variables (the EMA when there is one) with their running averages."""
        s = self.state()
        if s.get("ema"):
            return {"params": s["ema"]["params"], "batch_stats": s["ema"]["batch_stats"]}
        return {"params": {**s["frozen"], **s["params"]}, "batch_stats": s["batch_stats"]}

    def variables(self) -> dict[str, Any]:
        """The variables evaluated and returned: the trained ones, with batch-norm
        statistics recomputed for them when there are `bn_batches` (once per step, by the
        eval program)."""
        if not self.bn_batches:
            return self._trained_variables()
        step = int(mesh_lib.to_host(self._state_r["step"]))
        if self._precise is None or self._precise[0] != step:
            trained = self._trained_variables()
            trained_r = self._replicate(trained)
            per_batch = []
            for batch, shares in self._statistics_batches:
                stats = self._evaluate(trained_r, batch, True)["batch_statistics"]
                per_batch += [jax.tree.map(lambda a, d=d: a[d], stats) for d in range(shares)]
            trained["batch_stats"] = precise_bn.averaged(trained["batch_stats"], per_batch,
                                                         self._momenta)
            self._precise = (step, trained)
        return self._precise[1]


class ReversibleStrategy:
    """The reversible CPU-offload trainer behind the same protocol (public API only)."""

    lazy_compile = True  # its step program compiles during the first step

    def __init__(self, graph: Any, constants: Any, config: Any, *, image_size: int,
                 sched_kw: Mapping, params: dict[str, Any] | None,
                 frozen_names: Iterable[str], mesh: mesh_lib.Mesh | None = None) -> None:
        from nas.train.reversible import ReversibleTrainer

        self.num_classes = int(config.num_classes)
        self.mesh = mesh if mesh is not None else mesh_lib.from_config(config)
        self.trainer = ReversibleTrainer(
            graph, constants, config=config,
            image_shape=(image_size, image_size, int(config.input.get("channels", 3))),
            sched_kw=dict(sched_kw), params=params, seed=int(config.seed),
            frozen=set(frozen_names), mesh=self.mesh)
        self.ndev = self.trainer.n
        self.rng = jax.random.PRNGKey(config.seed)
        self.sched_fns = optim.make(config, {"x": {"kernel": np.zeros(1)}}, sched_kw)[1]
        self._step = 0

    def compile(self, batch: Any, eval_batch: Mapping[str, np.ndarray]) -> float:
        return 0.0  # the step program compiles during the first step

    def memory(self) -> tuple[int, int]:
        temp = getattr(self.trainer, "max_temp_bytes", None)
        temp = int(temp()) if callable(temp) else 0
        return temp, temp

    def train_step(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        metrics = self.trainer.train_step(batch, self.rng)
        self._step += 1
        return metrics

    def host_metrics(self, metrics: Any) -> dict[str, float]:
        return {k: float(v) for k, v in metrics.items()}

    def sync(self) -> None:
        pass  # train_step returns host values

    def eval_fn(self) -> EvalFn:
        def run(batch: Mapping[str, np.ndarray]) -> tuple[float, float, float, np.ndarray]:
            images = np.asarray(batch["image"])
            logits = np.asarray(self.trainer.predict(images), np.float32)
            labels = np.asarray(batch["label"]).reshape(-1)
            mask = np.asarray(batch["mask"], np.float32).reshape(-1)
            logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
            loss = -np.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]
            correct = (np.argmax(logits, -1) == labels).astype(np.float32)
            return (float(np.sum(correct * mask)), float(np.sum(loss * mask)),
                    float(np.sum(mask)), real_rows(correct, batch))

        return run

    def learning_rate(self, step: int) -> float:
        return optim.learning_rate(self.sched_fns, step)

    def state(self) -> dict[str, Any]:
        return self.trainer.state()

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.trainer.load_state(state)
        self._step = int(np.asarray(state["step"]))

    def variables(self) -> dict[str, Any]:
        params = self.trainer.full_params
        params = params() if callable(params) else params
        return {"params": params, "batch_stats": {}}
