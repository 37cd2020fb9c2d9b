"""Settings of the fit of a child's new ops (`search.fit`), checked like the rest of the
search config; the fit itself is `nas.train.fit`."""

from __future__ import annotations

import dataclasses

from nas import schema


@dataclasses.dataclass(frozen=True)
class FitConfig(schema.Section):
    # at most this many optimizer steps (0 disables fitting)
    steps: int = schema.setting(40, schema.at_least(0, expected="(0: no fitting)"))
    batches: int = schema.setting(4, schema.positive())  # distinct training batches, cycled
    # Images per step. A fit of convs, dense layers and norms reaches the same error on
    # held-out images with 16 as with 32 in half the time, but a new batch norm over
    # features without spatial positions (after a FLATTEN) trains on statistics of the
    # batch's images alone, which need the larger batch (benchmarks/fit_settings.py).
    batch_size: int = schema.setting(16, schema.positive())
    bn_batch_size: int = schema.setting(32, schema.positive())
    lr: float = schema.setting(3e-3, schema.positive(float))  # Adam
    # Stop once `patience` steps (checked after each round over the batches) have not
    # lowered a round's mean loss by the fraction `min_improvement` (counts, never clocks:
    # the same fit on any machine).
    patience: int = schema.setting(10, schema.positive())
    min_improvement: float = schema.setting(0.01, schema.fraction())
    # A child whose fitted new ops still miss the parent's tensors by more than this
    # (normalized mean squared error) fails before it trains: it cannot start near its
    # parent (errors of 0.8 and more started children 54-98 points down on the
    # README's "From Python" model, docs/benchmarks.md). 0: never refused.
    max_error: float = schema.setting(
        0.0, schema.at_least(0, float, expected="(0: no fit error refuses a child)"))

    @property
    def images_per_batch(self) -> int:
        """Images read per training batch: enough for either kind of fit."""
        return max(self.batch_size, self.bn_batch_size)
