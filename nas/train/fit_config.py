"""Settings of the fit of a child's new ops (`search.fit`), checked like the rest of the
search config; the fit itself is `nas.train.fit`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nas import schema


@dataclasses.dataclass(frozen=True)
class FitConfig:
    steps: int = 40  # at most this many optimizer steps (0 disables fitting)
    batches: int = 4  # distinct training batches, cycled
    # Images per step. A fit of convs, dense layers and norms reaches the same error on
    # held-out images with 16 as with 32 in half the time, but a new batch norm over
    # features without spatial positions (after a FLATTEN) trains on statistics of the
    # batch's images alone, which need the larger batch (benchmarks/fit_settings.py).
    batch_size: int = 16
    bn_batch_size: int = 32
    lr: float = 3e-3  # Adam
    # Stop once `patience` steps (checked after each round over the batches) have not
    # lowered a round's mean loss by the fraction `min_improvement` (counts, never clocks:
    # the same fit on any machine).
    patience: int = 10
    min_improvement: float = 0.01
    # A child whose fitted new ops still miss the parent's tensors by more than this
    # (normalized mean squared error) fails before it trains: it cannot start near its
    # parent (errors of 0.8 and more started children 54-98 points down on the
    # README's "From Python" model, docs/benchmarks.md). 0: never refused.
    max_error: float = 0.0

    @property
    def images_per_batch(self) -> int:
        """Images read per training batch: enough for either kind of fit."""
        return max(self.batch_size, self.bn_batch_size)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, prefix: str = "search.fit."
                  ) -> FitConfig:
        """`prefix`: the section's path, which every error names its field under."""
        data = dict(data.to_dict() if hasattr(data, "to_dict") else (data or {}))
        schema.check(data, FIT_SCHEMA, prefix)
        return cls(**data)


FIT_SCHEMA: dict[str, schema.Field] = {
    "steps": schema.at_least(0, expected="(0: no fitting)"),
    "batches": schema.positive(),
    "batch_size": schema.positive(),
    "bn_batch_size": schema.positive(),
    "lr": schema.positive(float),
    "patience": schema.positive(),
    "min_improvement": schema.fraction(),
    "max_error": schema.at_least(0, float, expected="(0: no fit error refuses a child)"),
}
