"""What one Ray task runs on its node: a candidate's training, with nothing read from or
written to the driver's disk.

The task (`nas.search.execution.task.Task`, user functions included) arrives with its
dataset as an object-store reference (`ray_data`) and its run folder (`run_in`: a rung's
checkpoint to resume, its curve so far) as `Files`. It trains in a
temporary folder of its node and sends back the result and that folder (`Files`): the
driver writes both to its workdir. So do its TensorBoard event files (`search.tensorboard`),
written in a folder of the node and added to the task's run on the driver's disk.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from nas.search.execution.ray_data import node_train_config
from nas.search.execution.ray_files import Files, read_files, write_files
from nas.search.execution.task import Failure, Task
from nas.search.execution.worker import describe_failure, train_or_failure

RUN_FOLDER = "train"


def keep_returned(rel: str, checkpoint_step: str | None) -> bool:
    """The run-folder files a task sends back: its curve and run files always, and the
    latest checkpoint only when a later rung will resume from it."""
    parts = rel.split("/")
    if parts[0] != "checkpoints":
        return True
    return checkpoint_step is not None and len(parts) > 1 and parts[1] == checkpoint_step


def latest_step(workdir: str) -> str | None:
    """The name of the newest finished checkpoint folder in `workdir` (orbax names it by
    its step), or None."""
    folder = os.path.join(workdir, "checkpoints")
    steps = [n for n in os.listdir(folder) if n.isdigit()] if os.path.isdir(folder) else []
    return max(steps, key=int) if steps else None


def run_task(task: Task, runtime: dict[str, Any], dataset: dict[str, Any] | None,
             run_in: Files | None
             ) -> tuple[Any, Files | None, dict[str, float], Files | None]:
    """(result or `Failure`, the run folder's files, timings, the TensorBoard run's files
    or None) of one task on this node; `runtime` are `train_candidate`'s keyword arguments
    (e.g. `share_device`)."""
    import ray

    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="nas-ray-task-") as tmp:
        workdir = os.path.join(tmp, RUN_FOLDER)
        os.makedirs(workdir)
        board = os.path.join(tmp, "tensorboard") if task.tensorboard else None
        start = time.perf_counter()
        try:
            if run_in is not None:
                write_files(run_in, workdir)
            train_config = node_train_config(task.train_config, dataset, ray.get)
        except (Exception, MemoryError) as e:  # noqa: BLE001 - sent back, named
            return Failure(*describe_failure(e)), None, timings, None
        timings["ray_data_s"] = time.perf_counter() - start
        start = time.perf_counter()
        result = train_or_failure(task.replace(train_config=train_config, workdir=workdir,
                                               tensorboard=board), **runtime)
        timings["ray_train_s"] = time.perf_counter() - start
        step = latest_step(workdir) if task.stop_epochs is not None else None
        out = read_files(workdir, keep=lambda rel: keep_returned(rel, step))
        curves = read_files(board) if board and os.path.isdir(board) else None
    return result, out, timings, curves
