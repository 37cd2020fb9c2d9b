"""Training hyperparameters that evolve with the architecture (`search.hparams`).

Why: the learning rate that fine-tunes one child well may not suit its grandchild. As in
population-based training's explore step, each child takes its parent's values, each times
0.8 or 1.25 and clipped to its range; the seed starts from the config's, clipped. Every
draw comes from `search.seed` and the proposal counter.

    search.hparams = {"lr": (1e-4, 1e-2), "wd": (1e-5, 1e-3)}

Fields: `lr`, `wd` (of `train`) and `child_lr` (taken instead of `lr` by children that
fine-tune at `search.child_lr`). Empty: off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from nas import schema

FIELDS = ("lr", "wd", "child_lr")
FACTORS = (0.8, 1.25)
STREAM = 51  # folded into the proposal's rng: hparams draws never shift the others


class HparamsSettings(Protocol):
    """What this module reads of `settings.SearchSettings` (which imports this module)."""

    @property
    def child_lr(self) -> float: ...

    @property
    def hparams(self) -> Mapping[str, tuple[float, float]]: ...


def check(hparams: Any, prefix: str = "search.hparams") -> dict[str, tuple[float, float]]:
    """{field: (low, high)} from the config, or a ValueError naming the field."""
    if hasattr(hparams, "to_dict"):
        hparams = hparams.to_dict()
    if not isinstance(hparams, Mapping):
        raise ValueError(f"config field '{prefix}' must be a dict of field to (low, high), "
                         f"got {type(hparams).__name__}")
    schema.check_names(hparams, dict.fromkeys(FIELDS), f"{prefix}.")
    out = {}
    for name, bounds in hparams.items():
        if (not isinstance(bounds, list | tuple) or len(bounds) != 2
                or not all(isinstance(b, int | float) and not isinstance(b, bool)
                           for b in bounds)):
            raise ValueError(f"config field '{prefix}.{name}' must be (low, high), got "
                             f"{bounds!r}")
        low, high = float(bounds[0]), float(bounds[1])
        if not (0 < low < high < math.inf):
            raise ValueError(f"config field '{prefix}.{name}' must be (low, high) with "
                             f"0 < low < high, got ({low:g}, {high:g})")
        out[str(name)] = (low, high)
    return out


def _configured(name: str, train: Mapping[str, Any], search: HparamsSettings) -> float:
    if name == "child_lr":
        return search.child_lr or float(train.get("lr", 0.0))
    return float(train.get(name, 0.0))


def seed_values(train: Mapping[str, Any], search: HparamsSettings) -> dict[str, float]:
    """The seed's values: the config's, clipped to each range ({} when off)."""
    ranges = search.hparams
    return {name: float(np.clip(_configured(name, train, search), low, high))
            for name, (low, high) in sorted(ranges.items())}


def perturb(parent: Mapping[str, float] | None, train: Mapping[str, Any],
            search: HparamsSettings, seed: int, proposal: int) -> dict[str, float]:
    """A child's values: its parent's (else the seed's), each times 0.8 or 1.25, clipped;
    drawn from (seed, proposal) alone."""
    ranges = search.hparams
    if not ranges:
        return {}
    start = seed_values(train, search)
    rng = np.random.default_rng([int(seed), int(proposal), STREAM])
    out = {}
    for name, (low, high) in sorted(ranges.items()):
        value = float((parent or {}).get(name, start[name]))
        out[name] = float(np.clip(value * FACTORS[int(rng.integers(len(FACTORS)))], low, high))
    return out


def apply(config: dict[str, Any], values: Mapping[str, float] | None, is_seed: bool,
          search: HparamsSettings) -> dict[str, Any]:
    """A candidate's training config with its values: `wd`; `lr` for the seed, and for
    children not fine-tuning at `search.child_lr`; `child_lr` as a child's rate."""
    if not values:
        return config
    config = dict(config)
    if "wd" in values:
        config["wd"] = float(values["wd"])
    own_rate = search.child_lr > 0
    if "lr" in values and (is_seed or not own_rate):
        config["lr"] = float(values["lr"])
    if not is_seed and "child_lr" in values:
        config["lr"] = float(values["child_lr"])
    return config
