"""What a training run can refuse before it prints or writes anything.

Why: `train_and_eval` finds some config mistakes only once it builds the model or the
optimizer (an unknown `model_name`, a schedule that cannot be built, the reversible
trainer for a network that is not reversible), after a command line has already printed
its settings and a workdir exists. (A warmup or cooldown that outlasts training is
shortened, not refused: `schedule_notes` says how.) These checks cost no
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
from nas.train.config import image_shape, total_steps


def training_steps(config: ml_collections.ConfigDict) -> tuple[int, float]:
    """(total_steps, steps_per_epoch) of a full training config, counted the way
    `train_and_eval` counts them (the training split's examples, without a carved
    validation part, over the global batch)."""
    inp = config.input
    size = data_lib.split_size(inp, inp.data.split, inp.data_dir or None)
    steps_per_epoch = size / int(inp.batch_size)
    return total_steps(config, steps_per_epoch), steps_per_epoch


def _schedules(schedule: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """(config field, schedule dict) of each schedule the optimizer would build."""
    if isinstance(schedule, Mapping) or hasattr(schedule, "to_dict"):
        return [("schedule", dict(schedule))]
    return [(f"schedule[{i}]", dict(sched)) for i, (_, sched) in enumerate(schedule)
            if sched is not None]


def check(config: ml_collections.ConfigDict, graph: Any = None,
          constants: Any = None) -> tuple[Any, Any]:
    """(graph, constants) to train: `graph` as given, else the config's zoo model. Raises a
    one-line ValueError naming the config field for a model, number of classes, compute
    dtype or schedule that training would refuse later. `config` is a full training config
    (`nas.train.config.with_defaults`)."""
    num_classes = data_lib.check_num_classes(config)  # 0: the data's; else must agree
    if graph is None:
        from nas.train.train import build_graph

        try:
            graph, constants = build_graph(config.model_name, num_classes,
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
    schedule_notes(config)
    return graph, constants


def schedule_notes(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """One line per schedule that `optim.fitted_ramps` shortens to fit the run, naming its
    config field under `prefix` (the config's path in a larger one: "train."); a schedule
    that cannot be built (e.g. a negative warmup) raises a one-line ValueError naming the
    field. Builds the schedule functions, never runs them."""
    total_steps, steps_per_epoch = training_steps(config)
    where = (f"total_epochs {float(config.total_epochs):g} x {steps_per_epoch:.1f} steps per "
             f"epoch at batch size {int(config.input.batch_size)}")
    if total_steps > int(steps_per_epoch * float(config.total_epochs)) > 0:
        where += f", raised to min_steps {int(config.min_steps)}"
    notes = []
    for field, sched in _schedules(config.schedule):
        path = f"{prefix}{field}"
        try:
            optim.make_schedule(sched, total_steps=total_steps, steps_per_epoch=steps_per_epoch,
                                global_batch_size=int(config.input.batch_size))
            note = optim.shortening_note(sched, total_steps, steps_per_epoch)
        except ValueError as e:
            reason = str(e).removeprefix("schedule: ")
            raise ValueError(f"config field {path!r}: {reason} ({where})") from None
        if note:
            notes.append(f"config field {path!r}: {note} ({where})")
    return notes


def check_outputs(graph: Any, constants: Any, config: ml_collections.ConfigDict,
                  what: str) -> None:
    """A graph given as it is (`nas-train --graph`, a search's `search.seed_graph`) has its
    own output size: it must be the number of classes `config` trains (`num_classes`, or
    with 0 the data's), else the loss would fail in a trace or train a wrong head. One
    ValueError line naming `what` and both numbers. Shapes only: nothing is computed."""
    import jax
    import jax.numpy as jnp

    from nas.graph import Model

    want = data_lib.check_num_classes(config)
    shape = image_shape(config)
    rng = jax.random.PRNGKey(0)
    model = Model(graph, constants)
    try:
        logits, _ = jax.eval_shape(lambda x: model.init_with_output(
            {"params": rng, "dropout": rng}, x), jnp.zeros((1, *shape), jnp.float32))
    except Exception as e:  # noqa: BLE001 - any failure is the graph's, on these inputs
        reason = (str(e).splitlines() or [type(e).__name__])[0][:300]
        raise ValueError(f"{what} cannot run on the config's {'x'.join(map(str, shape))} "
                         f"images (input.image_size, input.channels): {reason}") from None
    got = getattr(logits, "shape", (None,))[-1]
    if got != want:
        raise ValueError(f"{what} outputs {got} logits, but dataset "
                         f"{config.input.data.name!r} has {want} classes (config field "
                         f"'num_classes')")


def labelled_schedule_notes(configs: Mapping[str, Any], section: str = "") -> list[str]:
    """`schedule_notes` of several training configs of one run, each line led by its label
    (a search's seed and its children train for different epochs): `configs` maps a label
    to a training config or its dict; `section` (e.g. "train.") is the configs' path in
    the user's, which every field named starts with."""
    from nas.train.config import with_defaults

    lines = []
    for label, config in configs.items():
        full = with_defaults(ml_collections.ConfigDict(dict(config)), section)
        lines += [f"{label}: {note}" for note in schedule_notes(full, section)]
    return lines
