"""TensorBoard runs of a search (`search.tensorboard=True`), under `<workdir>/tensorboard/`:
`candidate-0007` (candidate 7's curves; a seed's later rounds in `candidate-0001/round1`),
`study` (the driver's counts, best accuracy and fronts' hypervolumes per finished-candidate
count) and `finals/<run name>`.

Why the process that trains a candidate writes its run, and the driver only the study's:
each run then has one writer wherever it trains, and nothing is sent between processes for
it. Nothing the search decides reads these files: a writer that fails logs one warning and
stops. The writer is tensorboardX, an optional extra (`alphanas-search[tensorboard]`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from absl import logging

from nas.search.store.candidate import Status
from nas.search.strategy.pareto import hypervolume
from nas.search.strategy.selection import cost_value, higher_better

FOLDER = "tensorboard"
STUDY_RUN = "study"

# metrics.jsonl's names -> the tags they are shown under (grouped: train/, validation/)
TAGS = {
    "training_loss": "train/loss",
    "training_accuracy": "train/accuracy",
    "learning_rate": "train/learning_rate",
    "l2_grads": "train/gradient_norm",
    "l2_params": "train/parameter_norm",
    "l2_updates": "train/update_norm",
    "accuracy": "validation/accuracy",
    "loss": "validation/loss",
    "im_sec_core_train": "throughput/train_images_per_s_per_core",
    "im_sec_core_infer": "throughput/infer_images_per_s_per_core",
}
# the record's position, not a curve
POSITION = ("step", "epoch")


def root(workdir: str) -> str:
    """The folder to open: `tensorboard --logdir <it>`."""
    return os.path.join(os.path.abspath(str(workdir)), FOLDER)


def candidate_run(workdir: str, candidate_id: int) -> str:
    return os.path.join(root(workdir), f"candidate-{int(candidate_id):04d}")


def finals_run(workdir: str, run_name: str) -> str:
    return os.path.join(root(workdir), "finals", run_name)


class RunWriter:
    """Scalars to one TensorBoard run in `folder` (None: writes nothing).

    The event file is opened at the first scalar, so a run that logs nothing leaves no
    folder, and purges what earlier files of the run hold from that step on, so a resumed
    run shows each step once. A writer that cannot be made or written logs one warning and
    is off."""

    def __init__(self, folder: str | None) -> None:
        self.folder = folder
        self._writer: Any = None
        self.off = folder is None

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Each finite number of `values` under its tag, at `step`."""
        if self.off:
            return
        try:
            if self._writer is None:
                from tensorboardX import SummaryWriter

                # TensorBoard reads a run's files in name order and the purge works on those
                # read before: the nanosecond keeps two writers of one second in order
                self._writer = SummaryWriter(logdir=self.folder, flush_secs=10,
                                             purge_step=int(step),
                                             filename_suffix=f".{time.time_ns()}.{os.getpid()}")
            for tag, value in values.items():
                if _finite(value):
                    self._writer.add_scalar(tag, float(value), int(step))
        except Exception as e:  # noqa: BLE001 - the search goes on without its curves
            self.off = True
            logging.warning("TensorBoard run %s: not written (%s)", self.folder,
                            str(e).splitlines()[0] if str(e) else type(e).__name__)

    def record(self, record: Mapping[str, Any]) -> None:
        """A metrics.jsonl record's numbers at its step, named by `TAGS` (others under
        `other/`); the final summary is skipped."""
        if self.off or "step" not in record:
            return
        values = {TAGS.get(k, f"other/{k}"): v for k, v in record.items()
                  if k not in POSITION and _finite(v)}
        if values:
            self.scalars(values, int(record["step"]))

    def flush(self) -> None:
        if self._writer is not None and not self.off:
            try:
                self._writer.flush()
            except Exception:  # noqa: BLE001 - as in `scalars`
                self.off = True

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # as in `scalars`
                self._writer.close()
            self._writer = None


def round_folder(folder: str | None, workdir: str | None, where: str | None) -> str | None:
    """The run of one training of a task: `folder`, or for a seed's round k (trained in
    `<workdir>/round<k>`, its steps from 0 again) `<folder>/round<k>`, so curves do not
    overlap."""
    if folder is None or not where or not workdir or \
            os.path.abspath(where) == os.path.abspath(workdir):
        return folder
    return os.path.join(folder, os.path.basename(os.path.normpath(where)))


class StudyRun:
    """The driver's study run: one point per finished-candidate count, when it grows."""

    def __init__(self, workdir: str, costs: Sequence[str]) -> None:
        self.writer = RunWriter(os.path.join(root(workdir), STUDY_RUN))
        # a front's hypervolume needs a reference cost: twice the seed's (lower is better)
        self.costs = tuple(c for c in costs if not higher_better(c))
        self._written = 0
        self._seed: dict[str, float] | None = None

    def update(self, study: Any, finished: int, counts: Mapping[str, int], done: Any
               ) -> None:
        """`counts`: the study's per status; `done`: the driver's refreshed `DoneCache`."""
        if finished <= self._written or self.writer.off:
            return
        self._written = finished
        try:
            refused = sum(n for kinds in study.refusal_counts().values()
                          for n in kinds.values())
            values: dict[str, float] = {
                "candidates/done": counts.get(Status.DONE, 0),
                "candidates/failed": (counts.get(Status.FAILED, 0)
                                      + counts.get(Status.INFEASIBLE, 0)),
                "candidates/stopped": counts.get(Status.STOPPED, 0),
                "candidates/refused": refused,
            }
            best = done.best()
            if best is not None:
                values["best/validation_accuracy"] = float(best.accuracy)
                values.update(self.hypervolumes(done))
            self.writer.scalars(values, finished)
            self.writer.flush()
        except Exception as e:  # noqa: BLE001 - the search goes on without its study run
            self.writer.off = True
            logging.warning("TensorBoard run %s: not written (%s: %s)", self.writer.folder,
                            type(e).__name__, str(e).splitlines()[0] if str(e) else "")

    def hypervolumes(self, done: Any) -> dict[str, float]:
        """Each front's hypervolume, costs in units of the seed's, against (0 accuracy,
        twice the seed's cost): the seed alone scores its accuracy, a better front more."""
        seed = self.seed_costs(done)
        out = {}
        for cost in self.costs:
            scale = seed.get(cost)
            if not scale or scale <= 0:
                continue
            points = [(a, v / scale) for a, v in done.front_points(cost)]
            out[f"front/hypervolume_{cost}"] = hypervolume(points, (0.0, 2.0))
        return out

    def seed_costs(self, done: Any) -> dict[str, float]:
        """The first seed's costs (the hypervolumes' unit), found once."""
        if self._seed is None:
            seed = next((r for r in done.done() if r.parent_id is None), None)
            if seed is None:
                return {}
            self._seed = {c: v for c in self.costs
                          if (v := cost_value(seed, c)) is not None}
        return self._seed

    def close(self) -> None:
        self.writer.close()


def _finite(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value))
