"""What a training run can refuse before it prints or writes anything.

Why: `train_and_eval` finds some config mistakes only once it builds the model or the
optimizer (an unknown `model_name`, a schedule whose warmup and cooldown outlast
training, the reversible trainer for a network that is not reversible), after a command
line has already printed its settings and a workdir exists. These checks cost no
training: the graph is built without weights, the training split is only opened to count
its examples, and the schedule functions are made but never run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from nas.graph.reversible import is_reversible
from nas.train import data as data_lib
from nas.train import optim, trainers


def training_steps(config: ml_collections.ConfigDict) -> tuple[int, float]:
    """(total_steps, steps_per_epoch) of a full training config, counted the way
    `train_and_eval` counts them (the training split's examples, without a carved
    validation part, over the global batch)."""
    inp = config.input
    source = data_lib.split_source(inp, inp.data.split, inp.data_dir or None)
    steps_per_epoch = len(source) / int(inp.batch_size)
    return max(1, int(steps_per_epoch * float(config.total_epochs))), steps_per_epoch


def _schedules(schedule: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """(config field, schedule dict) of each schedule the optimizer would build."""
    if isinstance(schedule, Mapping) or hasattr(schedule, "to_dict"):
        return [("schedule", dict(schedule))]
    return [(f"schedule[{i}]", dict(sched)) for i, (_, sched) in enumerate(schedule)
            if sched is not None]


def check(config: ml_collections.ConfigDict, graph: Any = None,
          constants: Any = None) -> tuple[Any, Any]:
    """(graph, constants) to train: `graph` as given, else the config's zoo model. Raises a
    one-line ValueError naming the config field for a model, compute dtype or schedule
    that training would refuse later. `config` is a full training config
    (`nas.train.config.with_defaults`)."""
    if graph is None:
        from nas.train.train import build_graph

        try:
            graph, constants = build_graph(config.model_name, config.num_classes,
                                           config.input.image_size, config.get("model"))
        except ValueError as e:
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            named = text.startswith(("train.model", "config field"))
            raise ValueError(text if named else f"config field 'model_name': {text}") from None
    trainers.compute_dtype(config)
    if config.trainer == "reversible" and not is_reversible(constants):
        raise ValueError("config field 'trainer' is 'reversible', but the model is not a "
                         "reversible network (e.g. model_name 'revnet'); use 'standard' or "
                         "'auto'")
    total_steps, steps_per_epoch = training_steps(config)
    for field, sched in _schedules(config.schedule):
        try:
            optim.make_schedule(sched, total_steps=total_steps, steps_per_epoch=steps_per_epoch,
                                global_batch_size=int(config.input.batch_size))
        except ValueError as e:
            reason = str(e).removeprefix("schedule: ")
            raise ValueError(
                f"config field {field!r}: {reason} (total_epochs {float(config.total_epochs):g}"
                f" x {steps_per_epoch:.1f} steps per epoch at batch size "
                f"{int(config.input.batch_size)})") from None
    return graph, constants
