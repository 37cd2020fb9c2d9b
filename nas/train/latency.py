"""Inference latency of a compiled model, with its spread: a median you can compare.

Why: one timing of a small model at batch 1 moves by half its value with what else runs on
the machine (0.47 against 0.68 ms for the same seed). So a latency here is the
median of many calls after a warm-up, taken until the median's 95 % interval is within a
set relative precision of it, and its interquartile range (IQR) is kept beside it: the
search ties costs that differ by less than their spread (`nas.stats.cost_ties`).

Limits are counts (`min_calls`, `max_calls`, checked every `check_every` calls); the clock
(`max_seconds`) is a safety net for a model far slower than expected, never what decides
for a model timed normally. The same function times a user's cost called with repeats
(`spread_of`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nas import schema

DEVICES = ("train", "cpu")


@dataclasses.dataclass(frozen=True)
class LatencySettings(schema.Section):
    """How `inference_latency` times: `batch` examples per call on `device` ("train": the
    device the candidate trained on, "cpu": the host's), `warmup` calls first, then at
    least `min_calls` and at most `max_calls` timed calls, stopping once the median's 95 %
    interval (order statistics) is within +-`precision` of it; `max_seconds` of timing
    stops it too (a safety net)."""

    batch: int = schema.setting(1, schema.at_least(1))
    device: str = schema.setting("train", schema.one_of(*DEVICES))
    warmup: int = schema.setting(10, schema.at_least(0))
    min_calls: int = schema.setting(30, schema.at_least(1))
    max_calls: int = schema.setting(2000, schema.at_least(1))
    check_every: int = schema.setting(10, schema.at_least(1))
    precision: float = schema.setting(0.02, schema.positive(float))
    max_seconds: float = schema.setting(20.0, schema.positive(float))

    def check_section(self, prefix: str) -> None:
        if self.max_calls < self.min_calls:
            raise ValueError(f"config field '{prefix}max_calls' must be >= {prefix}min_calls "
                             f"({self.min_calls}), got {self.max_calls}")


@dataclasses.dataclass(frozen=True)
class Timing:
    """A measured latency: the median and interquartile range in milliseconds, the calls
    timed, and whether the median reached the precision asked (False: a cap stopped it)."""

    median_ms: float
    iqr_ms: float
    calls: int
    precise: bool

    def metrics(self, name: str = "latency_ms") -> dict[str, float]:
        """What a candidate's record keeps: the median under `name`, its spread beside it."""
        return {name: self.median_ms, f"{name}_iqr": self.iqr_ms,
                f"{name}_calls": float(self.calls)}


def median_interval(samples: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """The distribution-free ~95 % interval of the median: the order statistics
    n/2 -+ z sqrt(n)/2 (binomial at 1/2, normal approximation)."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    half = z * math.sqrt(n) / 2.0
    low = max(int(math.floor(n / 2.0 - half)), 0)
    high = min(int(math.ceil(n / 2.0 + half)), n - 1)
    return float(x[low]), float(x[high])


def spread_of(samples: Sequence[float]) -> tuple[float, float]:
    """(median, interquartile range) of `samples`."""
    x = np.asarray(samples, dtype=float)
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return float(median), float(q3 - q1)


def time_calls(call: Callable[[], Any], settings: LatencySettings,
               clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time `call()` (which must block until its result is ready) as `LatencySettings` says."""
    for _ in range(settings.warmup):
        call()
    samples: list[float] = []
    start = clock()
    precise = False
    while len(samples) < settings.max_calls:
        t = clock()
        call()
        samples.append((clock() - t) * 1e3)
        n = len(samples)
        if n >= settings.min_calls and n % settings.check_every == 0:
            low, high = median_interval(samples)
            median = float(np.median(samples))
            if median > 0 and (high - low) / 2.0 <= settings.precision * median:
                precise = True
                break
            if clock() - start > settings.max_seconds:
                break
    median, iqr = spread_of(samples)
    return Timing(median, iqr, len(samples), precise)


def inference_latency(apply_fn: Callable[[Any, Any], Any], variables: Any,
                      example_shape: Sequence[int], settings: LatencySettings | None = None
                      ) -> Timing:
    """Latency of the compiled `apply_fn(variables, x)` on a batch of `settings.batch`
    float32 examples of `example_shape`, on the device `settings.device` names (the first
    local device, or the host's CPU). Compiled and warmed before timing."""
    import jax

    settings = settings or LatencySettings()
    device = (jax.local_devices(backend="cpu")[0] if settings.device == "cpu"
              else jax.local_devices()[0])
    x = np.random.default_rng(0).standard_normal((settings.batch, *example_shape))
    x = jax.device_put(x.astype(np.float32), device)
    v = jax.device_put(variables, device)
    compiled = jax.jit(apply_fn).lower(v, x).compile()
    return time_calls(lambda: jax.block_until_ready(compiled(v, x)), settings)
