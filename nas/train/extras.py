"""Per-example arrays beside images and labels, and the loss that sees the whole batch.

Why: distillation (a teacher's soft labels), sample weights, per-example targets and
multi-task losses need more than `(logits, labels)`. A user's loss may take a third
argument, `batch`, a dict of

    "images"   float32 (batch, H, W, C), as the model saw them (augmented and scaled)
    "labels"   int32 (batch,)
    NAME       each per-example array the data carries (`nas.run_search(extras=...)`,
               or an npz file's arrays besides x_train, y_train, x_test, y_test)

An extra is a feature of its example: it is stored with the image (`nas.train.userdata`),
so it follows the example through shuffling, batching, the devices and the validation
split, reaches every worker with the data, and is part of the data's digest. Inside the
pipeline an extra NAME is the example key `PREFIX + NAME`; the test split has none.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

PREFIX = "extra_"  # an extra's key in the pipeline's examples and batches
RESERVED = ("images", "labels", "x_train", "y_train", "x_test", "y_test")


def takes_batch(fn: Callable[..., Any]) -> bool:
    """Whether a loss takes `(logits, labels, batch)` rather than `(logits, labels)`: a
    third positional parameter that is required or named `batch`, or *args (a third one
    with a default, as optax's `axis`, keeps the two-argument form)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: the 2-argument form
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                   p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 and (positional[2].default is inspect.Parameter.empty
                                     or positional[2].name == "batch")


def keys_of(batch: Mapping[str, Any]) -> list[str]:
    """The pipeline keys of the extras in `batch`, sorted."""
    return sorted(k for k in batch if k.startswith(PREFIX))


def loss_batch(images: Any, labels: Any, batch: Mapping[str, Any]) -> dict[str, Any]:
    """The dict a batch-taking loss receives (see the module docstring)."""
    out = {"images": images, "labels": labels}
    out.update({k[len(PREFIX):]: batch[k] for k in keys_of(batch)})
    return out


class MissingExtra(ValueError):
    """A loss read a batch entry that the data does not carry."""


def call_loss(fn: Callable[..., Any], logits: Any, labels: Any, batch: dict[str, Any]) -> Any:
    """`fn(logits, labels, batch)`; a lookup of an entry the batch lacks is one line."""
    try:
        return fn(logits, labels, batch)
    except KeyError as e:
        key = e.args[0] if e.args else None
        if not isinstance(key, str) or key in batch:
            raise
        have = ", ".join(repr(k) for k in batch)
        raise MissingExtra(f"loss: reads batch[{key!r}], which the data does not carry "
                           f"(the batch has {have}); give it as nas.run_search(..., "
                           f"extras={{{key!r}: array}}) or as an array {key!r} in the "
                           f"npz file") from None


def checked(extras: Mapping[str, Any] | None, n_train: int, where: str = "extras"
            ) -> dict[str, np.ndarray]:
    """{name: array} with one row per training example, in the dtype it is stored in
    (floats float32, integers int32, booleans bool); each mistake one line naming it."""
    if extras is None:
        return {}
    if not isinstance(extras, Mapping):
        raise ValueError(f"{where}: expected a dict of name to per-example array, got "
                         f"{type(extras).__name__}")
    out = {}
    for name, value in extras.items():
        if not isinstance(name, str) or not name.isidentifier() or name in RESERVED:
            raise ValueError(f"{where}: an extra's name must be an identifier other than "
                             f"{', '.join(RESERVED)}, got {name!r}")
        out[name] = stored(np.asarray(value), n_train, f"{where}[{name!r}]")
    return out


def stored(array: np.ndarray, n_train: int, where: str) -> np.ndarray:
    """`array` checked (one row per training example, numbers) in its stored dtype."""
    if array.ndim == 0 or len(array) != n_train:
        got = "a scalar" if array.ndim == 0 else f"length {len(array)}"
        raise ValueError(f"{where}: {got}, expected one row per training example "
                         f"({n_train}, the length of x_train)")
    if array.dtype == np.bool_:
        return array
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int32)
    if np.issubdtype(array.dtype, np.floating):
        return array.astype(np.float32)
    raise ValueError(f"{where}: dtype {array.dtype}, expected numbers (float, int or bool)")
