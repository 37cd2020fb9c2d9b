"""Training one candidate, as a pure function of plain data that any executor can run.

Processes of one search that serve one device on this host take turns on it (`DeviceTurn`).
Why a file lock named after the search's workdir and the device: every such process finds
it from plain data, whichever executor started it, and the kernel releases it when its
holder dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import math
import os
import re
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from nas.functions import unpack
from nas.graph import Model
from nas.graph.serialize import load
from nas.search.execution.task import Failure, Task
from nas.search.execution.tensorboard_runs import RunWriter, round_folder
from nas.search.execution.user_functions import cost_functions, measure_costs
from nas.train import train_and_eval
from nas.train.config import image_shape
from nas.train.fit import fit_for_task
from nas.train.latency import LatencySettings, inference_latency
from nas.train.memory import DeviceBudgetExceeded
from nas.train.options import TrainOptions
from nas.train.perf import read_records
from nas.train.rounds import Rounds, train_in_rounds
from nas.train.train import DeviceDataCache


class CandidateTimeout(RuntimeError):
    """The candidate ran past its (soft) time limit."""


class ClaimLost(RuntimeError):
    """This worker no longer holds the candidate's lease: its result must not be recorded."""


# ----------------------------------------------------------------------------- device turns


def device_key() -> str:
    """This process's device, the same in every process that uses it: "cpu" ("cpu-N" for
    a local executor's slot N), else the platform and the GPUs this process sees."""
    devices = jax.local_devices()
    platform = devices[0].platform
    if platform == "cpu":
        slot = os.environ.get("NAS_DEVICE_SLOT")
        return f"cpu-{slot}" if slot else "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = visible or ",".join(str(d.id) for d in devices)
    return f"{platform}-{ids.replace(',', '_')}"


def lock_path(workdir: str) -> str:
    """The lock file of this process's device for the search in `workdir`, under
    $NAS_DEVICE_LOCKS, else `nas-device-locks` in the host's temporary directory."""
    locks = os.environ.get("NAS_DEVICE_LOCKS") or os.path.join(tempfile.gettempdir(),
                                                              "nas-device-locks")
    search = hashlib.sha256(os.path.realpath(workdir).encode()).hexdigest()[:16]
    return os.path.join(locks, search, f"{device_key()}.lock")


class DeviceTurn:
    """A candidate's turn on its device (`with turn:`, as often as needed); `waited` sums
    the time spent waiting for it, which the candidate's time limit excludes."""

    def __init__(self, path: str) -> None:
        self.path, self.waited = path, 0.0
        self._fd: int | None = None

    def __enter__(self) -> DeviceTurn:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        start = time.monotonic()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self.waited += time.monotonic() - start
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases the lock


# ----------------------------------------------------------------------------- training


def train_candidate(
    task: Task,
    *,
    owner_pid: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    share_device: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trains and evaluates `task`; returns (metrics, final variables as numpy).

    `share_device` (a search's workdir): the steps, evaluations and latency timing take
    turns on this device with that search's other processes here. The soft time limit
    excludes device waits (CandidateTimeout). `owner_pid`: stops once this process is
    orphaned. `should_stop()` True: the claim was lost (ClaimLost). Costs and latency are
    measured at the last rung only."""
    graph, constants = load(task.graph_json)
    config = ml_collections.ConfigDict(task.train_config)
    shipped = unpack(task.functions)
    cost_fns = cost_functions(task.costs, shipped) if task.stop_epochs is None else {}
    turn = DeviceTurn(lock_path(share_device)) if share_device else None
    stop_now = StopCheck(task.time_limit_s, owner_pid, should_stop, turn)
    fitted: dict[str, float] = {}

    def refit(variables: dict[str, Any], built: Callable[[], None]) -> dict[str, Any]:
        out, metrics = fit_for_task(task.fit or {}, graph, constants, variables, built)
        fitted.update(metrics)
        return out

    if task.workdir:
        os.makedirs(task.workdir, exist_ok=True)
    options = TrainOptions(graph=graph, constants=constants, device_data_cache=device_data(),
                           stop_epochs=task.stop_epochs, device_stage=turn, functions=shipped,
                           refit=refit if task.fit is not None else None, should_stop=stop_now,
                           min_start_accuracy=task.min_start_accuracy)

    def run(variables: Any, where: str | None, seen: list[float]) -> tuple[Any, int, Any]:
        """One `train_and_eval` run from `variables` in `where`, each evaluation's accuracy
        appended to `seen`; its records mirrored to the task's TensorBoard run."""

        def on_eval(epoch: int, m: Any) -> bool:
            seen.append(float(m.acc))
            return not stop_now(-1)

        with RunWriter(round_folder(task.tensorboard, task.workdir, where)) as board:
            here = dataclasses.replace(options, workdir=where, init_variables=variables,
                                       evaluate_start=variables is not None,
                                       on_record=board.record if task.tensorboard else None)
            return train_and_eval(config, True, on_eval, options=here)

    if task.rounds:
        values, state = _train_rounds(run, task.rounds, task.workdir, task.init_variables,
                                      stop_now.restart)
    else:
        metrics, epochs, state = run(task.init_variables, task.workdir, [])
        values = {**metrics.record(), "epochs": epochs}
    values.update(fitted)
    if not all(math.isfinite(v) for v in values.values() if isinstance(v, float)):
        raise FloatingPointError(f"training diverged: non-finite metrics {values}")
    variables = jax.tree.map(np.asarray, jax.block_until_ready(state))
    if task.latency is not None and task.stop_epochs is None:
        values.update(latency_metrics(graph, constants, variables, dict(task.train_config),
                                      task.latency, turn))
    if cost_fns:
        values.update(measure_costs(cost_fns, graph, constants, variables,
                                    dict(task.train_config), values))
    return values, variables


@functools.cache
def device_data() -> Any:
    """This process's device-resident training set, kept between candidates."""
    return DeviceDataCache()


def latency_metrics(graph: Any, constants: Any, variables: dict[str, Any],
                    train_config: dict[str, Any], settings: dict[str, Any],
                    turn: Any = None) -> dict[str, float]:
    """`latency_ms`, `latency_ms_iqr` and the calls timed, holding the device `turn`."""
    model = Model(graph, constants)

    def infer(v: Any, x: Any) -> Any:
        return model.apply(v, x, deterministic=True, training=False)

    with turn if turn is not None else contextlib.nullcontext():
        timing = inference_latency(infer, variables, image_shape(train_config),
                                   LatencySettings(**settings))
    return timing.metrics()


class StopCheck:
    """Called after every train step: stopping raises at once. The soft time limit counts
    from the last `restart` (a seed's round), without device waits."""

    def __init__(self, time_limit_s: float, owner_pid: int | None,
                 should_stop: Callable[[], bool] | None, turn: Any) -> None:
        self.time_limit_s, self.owner_pid = time_limit_s, owner_pid
        self.should_stop, self.turn = should_stop, turn
        self.restart()

    def restart(self) -> None:
        self.start = time.monotonic()
        self.waited_before = self.turn.waited if self.turn is not None else 0.0

    def __call__(self, step: int) -> bool:
        waited = (self.turn.waited if self.turn is not None else 0.0) - self.waited_before
        if self.time_limit_s and time.monotonic() - self.start - waited > self.time_limit_s:
            where = f"step {step}" if step >= 0 else "an epoch's end"
            raise CandidateTimeout(f"exceeded its time limit of {self.time_limit_s:g} s "
                                   f"(stopped at {where})")
        if self.owner_pid is not None and os.getppid() != self.owner_pid:
            os._exit(1)  # orphaned: the driver died; its successor may train this candidate
        if self.should_stop is not None and self.should_stop():
            raise ClaimLost("this worker's lease on the candidate was lost")
        return False


def _train_rounds(run: Callable[..., Any], rounds: dict[str, Any], workdir: str | None,
                  start: Any, new_round: Callable[[], None]) -> tuple[dict[str, Any], Any]:
    """`run` in rounds (`nas.train.rounds.Rounds` fields) while the validation accuracy
    rises; the best round, with the rounds' record in its metrics. Round k runs in
    `workdir/round<k>`, so a resumed seed replays finished rounds from their checkpoints."""
    starts: list[float] = []

    def run_round(index: int, variables: Any) -> tuple[dict[str, Any], int, Any, list]:
        new_round()
        where = workdir if not workdir or index == 0 else os.path.join(workdir, f"round{index}")
        seen: list[float] = []
        metrics, epochs, state = run(variables, where, seen)
        values = metrics.record()
        if index == 0 and "start_accuracy" in values:  # the seed as it arrived
            starts.append(values["start_accuracy"])
        logged = epoch_accuracies(where) if where else []
        return values, epochs, state, logged or [*seen, float(values["accuracy"])]

    result = train_in_rounds(run_round, Rounds(**rounds), start)
    values = {**{k: v for k, v in result.metrics.items() if k != "start_accuracy"},
              **({"start_accuracy": starts[0]} if starts else {}),
              "epochs": result.epochs, "rounds": result.rounds,
              "best_round": result.best_round, "curve": result.curve,
              "round_accuracies": result.round_accuracies,
              "rounds_stopped": result.stopped_because,
              "arrived_trained": result.arrived_trained}
    return values, result.variables


def epoch_accuracies(workdir: str) -> list[float]:
    """Validation accuracy after each epoch, from a run's metrics.jsonl (the last record
    of an epoch wins: a resumed run may have logged it twice)."""
    by_epoch = {int(r["epoch"]): float(r["accuracy"])
                for r in read_records(os.path.join(workdir, "metrics.jsonl"))
                if "accuracy" in r and "epoch" in r}
    return [by_epoch[e] for e in sorted(by_epoch)]


_BYTES = re.compile(r"([0-9][0-9,]*)\s*bytes", re.IGNORECASE)


def one_line(e: BaseException) -> str:
    """"TypeName: the first non-blank line of its message"."""
    text = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[0] if text else ''}"


def describe_failure(e: BaseException) -> tuple[str, bool]:
    """(one-line message to record, whether the candidate is infeasible): out of memory,
    or over the device memory budget, fails again on the same machine."""
    if isinstance(e, DeviceBudgetExceeded):
        return f"infeasible: {e}", True
    text = str(e)
    # the host's MemoryError, or an allocation failure of XLA's
    if isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text or (
            "out of memory" in text.lower() and "Error" in type(e).__name__):
        match = _BYTES.search(text)
        asked = f"asked {int(match.group(1).replace(',', '')):,} bytes" if match else \
            "size not reported"
        return f"out of memory ({asked})", True
    return one_line(e)[:2000], False


def train_or_failure(task: Task, **runtime: Any) -> tuple[dict[str, Any], dict[str, Any]] | Failure:
    """`train_candidate`'s result, or its failure as data."""
    try:
        return train_candidate(task, **runtime)
    except (Exception, MemoryError) as e:  # noqa: BLE001 - the cause is sent back, named
        return Failure(*describe_failure(e))
