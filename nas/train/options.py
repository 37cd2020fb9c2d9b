"""`TrainOptions`: how one `train_and_eval` call runs, beside the config that says what
to train.

Why apart from the config: these are Python objects of the caller (a graph, a parent's
arrays, callbacks, a device lock, a cache) that no config file can hold, and they were a
pile of keyword arguments that every layer between a search worker and the step loop
passed on one by one. One frozen value travels instead; a caller derives another with
`dataclasses.replace`. Every field is checked when the value is made, so a bad one fails
in one line before any data is read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas.train.feeds import DeviceDataCache

ShouldStop = Callable[[int], bool]
# refit(variables, built) -> variables; it calls built() once its own programs are built
Refit = Callable[[dict[str, Any], Callable[[], None]], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Everything `train_and_eval` takes besides (config, eval_perf, callback); the
    defaults train the config's zoo model from scratch, without files."""

    graph: Any = None
    """The graph to train; None: the config's zoo model (`model_name`)."""
    constants: Any = None
    """The graph's constants (with `graph`)."""
    workdir: str | None = None
    """Where checkpoints, config.json, graph.json and metrics.jsonl go; a checkpoint there
    is resumed. None: nothing is written. A path-like value is kept as its str."""
    init_variables: Mapping[str, Any] | None = None
    """A parent's {"params", "batch_stats"}: every op whose name and shapes match starts
    from them (frozen with `freeze_inherited`, else fine-tuned)."""
    freeze: Iterable[str] = frozenset()
    """Op names whose params get no updates (and no optimizer state); kept as a frozenset."""
    freeze_inherited: bool = False
    """Freeze every op inherited from `init_variables`."""
    should_stop: ShouldStop | None = None
    """should_stop(step) -> bool after every train step; True stops early, and the candidate
    is then evaluated and its metrics (with `steps` trained) returned."""
    device_data_cache: DeviceDataCache | None = None
    """Keeps a device-resident training set between calls (a search worker's)."""
    stop_epochs: float | None = None
    """Train only this far into the `total_epochs` schedule (a multi-fidelity rung), then
    evaluate and checkpoint; a later call with the same `workdir` and a larger (or no)
    `stop_epochs` resumes, ending where one uninterrupted run would."""
    refit: Refit | None = None
    """refit(variables, built) -> variables: new values (same names and shapes) for the
    starting {"params", "batch_stats"}, computed while the steps compile (on the CPU from
    when it calls `built()` or returns); not called when `workdir` holds a checkpoint to
    resume. A search fits a child's new ops with it."""
    device_stage: contextlib.AbstractContextManager[Any] | None = None
    """Held while the steps and evaluations run, entered once setup, fitting and
    compilation are done (a search worker's turn on its shared device)."""
    progress: bool | None = None
    """Show a bar of the training steps on stderr; None: only when stderr is a terminal."""
    functions: Mapping[str, Callable[..., Any]] | None = None
    """A user's loss, optimizer and augmentation by value ({"loss": fn, ...}) for the
    config's fields that name them (`nas.train.custom`); others named are imported."""
    evaluate_start: bool = False
    """Evaluate the starting weights (after `refit`) before the first step, as
    `metrics.start_acc` (kept in the checkpoint: a resumed run reports it too)."""
    min_start_accuracy: float | None = None
    """With `evaluate_start`: a start below it raises `PoorStartError` before any step
    (a search's child that cannot start near its parent is not trained)."""
    on_record: Callable[[dict[str, Any]], None] | None = None
    """Called with each record metrics.jsonl gets (on host 0, with or without a
    `workdir`): a search worker mirrors the curves to TensorBoard with it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "freeze", _names(self.freeze))
        if isinstance(self.workdir, os.PathLike):
            object.__setattr__(self, "workdir", os.fspath(self.workdir))
        _check(self)


def _names(freeze: Any) -> frozenset[str]:
    """`freeze` as a frozenset of op names; a lone string is refused, not split into
    letters."""
    if isinstance(freeze, str | bytes) or not isinstance(freeze, Iterable):
        raise ValueError(f"TrainOptions.freeze: expected a collection of op names, "
                         f"got {freeze!r}")
    names = frozenset(freeze)
    odd = sorted(repr(n) for n in names if not isinstance(n, str))
    if odd:
        raise ValueError(f"TrainOptions.freeze: expected op names (str), got {', '.join(odd)}")
    return names


def _check(options: TrainOptions) -> None:
    """One ValueError naming the first field whose value has the wrong kind."""
    stop = options.stop_epochs
    if stop is not None and (isinstance(stop, bool) or not isinstance(stop, int | float)
                             or not 0 < stop < math.inf):
        _fail("stop_epochs", "a number of epochs > 0 (or None)", stop)
    for name in ("freeze_inherited", "evaluate_start"):
        if not isinstance(getattr(options, name), bool):
            _fail(name, "True or False", getattr(options, name))
    low = options.min_start_accuracy
    if low is not None and (isinstance(low, bool) or not isinstance(low, int | float)
                            or not math.isfinite(low)):
        _fail("min_start_accuracy", "an accuracy (or None)", low)
    if options.progress is not None and not isinstance(options.progress, bool):
        _fail("progress", "True, False or None", options.progress)
    if options.workdir is not None and not isinstance(options.workdir, str):
        _fail("workdir", "a directory path (or None)", options.workdir)
    for name in ("init_variables", "functions"):
        value = getattr(options, name)
        if value is not None and not isinstance(value, Mapping):
            _fail(name, "a mapping (or None)", value)
    for name in ("should_stop", "refit", "on_record"):
        value = getattr(options, name)
        if value is not None and not callable(value):
            _fail(name, "a function (or None)", value)
    stage = options.device_stage
    if stage is not None and not (hasattr(stage, "__enter__") and hasattr(stage, "__exit__")):
        _fail("device_stage", "a context manager (or None)", stage)


def _fail(field: str, expected: str, got: Any) -> None:
    raise ValueError(f"TrainOptions.{field}: expected {expected}, got {got!r}")
