"""A user's own loss, optimizer and augmentation, inside the compiled train step.

Why: researchers train with label smoothing, distillation, their own optimizer or
augmentation; a search is only useful to them if every candidate trains their way. The
config names each one (`loss`, `optimizer`, `augment`: "package.module:function", or the
built-in "softmax_xent" / ""), so a study records what trained it; a caller that holds the
functions themselves (`nas.run_search`, a search worker) passes them by value, and those
win over the names, which must then name them.

    loss(logits, labels) -> scalar        float32 logits (batch, classes), integer labels
    loss(logits, labels, batch) -> scalar the same, and the batch: its images as the model
                                          saw them and per-example extras (`nas.train.extras`)
    optimizer(learning_rate_schedule) -> optax.GradientTransformation
    augment(key, images) -> images        float32 images (batch, H, W, C) as the model
                                          sees them, on the device, inside the step
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nas.functions import resolve

KEYS = ("loss", "optimizer", "augment")
BUILT_IN = {"loss": "softmax_xent", "optimizer": "", "augment": ""}


def is_function_name(value: Any, key: str) -> bool:
    """Whether a config value is the built-in choice or a "module:function" name."""
    if not isinstance(value, str):
        return False
    if value == BUILT_IN[key]:
        return True
    module, sep, attr = value.partition(":")
    return bool(sep and module and attr)


def train_functions(config: Any, given: Mapping[str, Callable[..., Any]] | None = None
                    ) -> dict[str, Callable[..., Any]]:
    """{key: function} for the config's loss, optimizer and augmentation that are not
    built in: those in `given` (shipped by value), else imported by their names."""
    given = dict(given or {})
    out = {}
    for key in KEYS:
        name = config.get(key, BUILT_IN[key]) or BUILT_IN[key]
        if key in given:
            out[key] = given[key]
        elif name != BUILT_IN[key]:
            out[key] = resolve(name, f"config field '{key}'")
    return out


def refuse_reversible(functions: Mapping[str, Any]) -> None:
    """The reversible trainer computes its own cross-entropy and optimizer update, layer
    by layer: a user's functions cannot run there, which is one line, not a silent swap."""
    if functions:
        keys = ", ".join(sorted(functions))
        raise ValueError(f"config field 'trainer': the reversible trainer has its own loss, "
                         f"optimizer and augmentation; the user's {keys} apply to the "
                         f"standard trainer only (set trainer='standard')")
