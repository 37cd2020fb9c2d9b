"""Training one candidate, as a pure function that any executor can run anywhere.

`train_candidate` takes only plain data (config dict, graph JSON, numpy variables) and
returns plain data, so it runs the same in-process, in a local worker process, in a Ray task
or in an external `nas-search worker`. Failures are exceptions with a clear message that
`describe_failure` turns into what the study records; the caller records them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import time
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np

from nas.search.execution.task import Failure, Task
from nas.train.options import TrainOptions
from nas.train.perf import read_records

_DEVICE_DATA: Any = None  # this process's device-resident training set, kept between candidates


class CandidateTimeout(RuntimeError):
    """The candidate ran past its (soft) time limit."""


class ClaimLost(RuntimeError):
    """This worker no longer holds the candidate's lease: its result must not be recorded."""


def train_candidate(
    task: Task,
    *,
    owner_pid: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    share_device: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trains and evaluates a task (`nas.search.execution.task.Task`); returns (metrics,
    final variables as numpy). The other arguments say how this process runs it.

    With `share_device` (a search's workdir) the candidate's steps and evaluations take
    their turn on this process's device with the other processes of that search on this
    host (`nas.search.execution.device_turns`): those prepare their candidates (inherited weights,
    fitting, compilation) meanwhile. The soft `time_limit_s` is checked after every train
    step (CandidateTimeout); time spent waiting for the device does not count. With
    `owner_pid`, training stops as soon as this process is orphaned (its driver died, so
    nobody would record the result and a new claim may already train it). `should_stop()`
    (in-process callers only) True means the claim was lost (ClaimLost).

    Of the task: `stop_epochs` stops at a multi-fidelity rung (see `TrainOptions`);
    `workdir` holds the checkpoint that the next rung (or a restarted run) resumes from.
    `fit`: the child's new ops are first fitted to the tensors they replace, on this
    worker's device while its steps compile, unless `workdir` already holds a checkpoint
    to resume; its errors and time join the metrics. `functions`: the user's loss,
    optimizer, augmentation and costs by value; `costs`: each cost runs on the trained
    candidate once it reaches its last rung, and its value joins the metrics under its
    name (a cost that raises fails the candidate). `rounds` (a search's seed): trains on
    while it gains, `_train_rounds`. `latency` (None: not timed): at its last
    rung, the trained model's inference is timed holding this process's device turn, and
    `latency_ms` with its spread `latency_ms_iqr` join the metrics.
    """
    import jax

    from nas.graph.serialize import load
    from nas.search.execution.device_turns import DeviceTurn, lock_path
    from nas.search.execution.user_functions import cost_functions, measure_costs, unpack
    from nas.train.fit import fit_for_task

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
    run = functools.partial(_run_once, stop_now=stop_now, config=config, options=options,
                            curves=task.tensorboard, workdir=task.workdir)
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
        values.update(measure_costs(cost_fns, task.graph_json, variables, dict(task.train_config),
                                    values))
    return values, variables


def device_data() -> Any:
    """This process's device-resident training set, kept between candidates."""
    global _DEVICE_DATA
    if _DEVICE_DATA is None:
        from nas.train.train import DeviceDataCache

        _DEVICE_DATA = DeviceDataCache()
    return _DEVICE_DATA


def latency_metrics(graph: Any, constants: Any, variables: dict[str, Any],
                    train_config: dict[str, Any], settings: dict[str, Any],
                    turn: Any = None) -> dict[str, float]:
    """`latency_ms` (the median), `latency_ms_iqr` (its spread) and the calls timed, of the
    trained model's compiled inference (`nas.train.latency`). Timed while holding the
    device `turn` (when the worker shares its device), so that no other process of the
    search trains on it meanwhile."""
    import contextlib

    from nas.graph import Model
    from nas.train.config import image_shape
    from nas.train.latency import LatencySettings, inference_latency

    model = Model(graph, constants)

    def infer(v: Any, x: Any) -> Any:
        return model.apply(v, x, deterministic=True, training=False)

    with turn if turn is not None else contextlib.nullcontext():
        timing = inference_latency(infer, variables, image_shape(train_config),
                                   LatencySettings(**settings))
    return timing.metrics()


def _run_once(variables: Any, where: str | None, seen: list[float], *,
              stop_now: Callable[[int], bool], config: Any,
              options: TrainOptions, curves: str | None = None,
              workdir: str | None = None) -> tuple[Any, int, Any]:
    """One `train_and_eval` run of `options` from `variables` in `where`, each
    evaluation's accuracy appended to `seen`; starting weights given are evaluated first
    (`start_accuracy`). With `curves` (the task's TensorBoard run), its records are
    mirrored there (a round of a seed's, in `workdir/round<k>`, to a run of its own)."""
    from nas.search.execution.tensorboard_runs import RunWriter, round_folder
    from nas.train import train_and_eval

    def on_eval(epoch: int, m: Any) -> bool:
        seen.append(float(m.acc))
        return not stop_now(-1)

    with RunWriter(round_folder(curves, workdir, where)) as board:
        here = dataclasses.replace(options, workdir=where, init_variables=variables,
                                   evaluate_start=variables is not None,
                                   on_record=board.record if curves else None)
        return train_and_eval(config, True, on_eval, options=here)


class StopCheck:
    """Called after every train step: stopping raises at once, so nothing more is spent
    (no final evaluation or checkpoint of a candidate that is not recorded). The soft time
    limit counts from the last `restart` (a seed's round), without device waits."""

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
    """`run` in rounds (`nas.train.rounds.Rounds` fields `rounds`): the schedule is run
    again from where it ended while the validation accuracy still rises; the best round
    is returned, with `rounds`, `round_accuracies`, `best_round`, `curve` (validation
    accuracy after every epoch) and the epochs of all rounds in its metrics. The time
    limit is per round. Round 0 runs in `workdir`, round k in
    `workdir/round<k>`, so a resumed seed replays its finished rounds from their
    checkpoints. Each round's curve is read from its metrics.jsonl where it has one (the
    same after a resume), else from its evaluations."""
    from nas.train.rounds import Rounds, train_in_rounds

    def run_round(index: int, variables: Any) -> tuple[dict[str, Any], int, Any, list]:
        new_round()
        where = workdir if not workdir or index == 0 else os.path.join(workdir, f"round{index}")
        seen: list[float] = []
        metrics, epochs, state = run(variables, where, seen)
        values = metrics.record()
        logged = epoch_accuracies(where) if where else []
        return values, epochs, state, logged or [*seen, float(values["accuracy"])]

    starts: list[float] = []

    def first_start(index: int, variables: Any) -> tuple[dict[str, Any], int, Any, list]:
        out = run_round(index, variables)
        if index == 0 and "start_accuracy" in out[0]:  # the seed as it arrived
            starts.append(out[0]["start_accuracy"])
        return out

    result = train_in_rounds(first_start, Rounds(**rounds), start)
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


def is_out_of_memory(e: BaseException) -> bool:
    """An allocation failure: the host's MemoryError or XLA's RESOURCE_EXHAUSTED."""
    return isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in str(e) or (
        "out of memory" in str(e).lower() and "Error" in type(e).__name__)


def describe_failure(e: BaseException) -> tuple[str, bool]:
    """(one-line message to record, whether the candidate is infeasible: it can never run).

    Out-of-memory failures read "out of memory (asked N bytes)" and are infeasible: the
    same architecture on the same machine fails again. So is a candidate rejected before
    training for needing more device memory than the budget (its message carries the
    estimate and the budget)."""
    from nas.train.memory import DeviceBudgetExceeded

    if isinstance(e, DeviceBudgetExceeded):
        return f"infeasible: {e}", True
    if is_out_of_memory(e):
        match = _BYTES.search(str(e))
        asked = f"asked {int(match.group(1).replace(',', '')):,} bytes" if match else \
            "size not reported"
        return f"out of memory ({asked})", True
    text = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[0] if text else ''}"[:2000], False


def train_or_failure(task: Task, **runtime: Any) -> tuple[dict[str, Any], dict[str, Any]] | Failure:
    """`train_candidate` in a worker process or Ray task: its result, or its failure as
    data (`runtime`: `train_candidate`'s keyword arguments)."""
    try:
        return train_candidate(task, **runtime)
    except (Exception, MemoryError) as e:  # noqa: BLE001 - the cause is sent back, named
        return Failure(*describe_failure(e))
