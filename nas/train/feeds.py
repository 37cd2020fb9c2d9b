"""Where a training run's batches come from: grain on the host, or indices into a dataset
kept on the devices; and the device-resident datasets a long-lived worker keeps.

Why apart from `train`: a feed is a small object with one job (the next batch of a step,
and what a checkpoint stores to resume it), the same for every trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nas.train import devdata


class HostFeed:
    """Host batches from grain; its iterator state is what a checkpoint stores."""

    on_device = False

    def __init__(self, dataset: Any) -> None:
        self._it = iter(dataset)

    def next(self, step: int) -> dict[str, np.ndarray]:
        return next(self._it)

    def get_state(self) -> Any:
        return self._it.get_state()

    def set_state(self, state: Any) -> None:
        self._it.set_state(state)


class DeviceFeed:
    """Indices into a device-resident dataset: a function of the step, so no state."""

    on_device = True

    def __init__(self, device_data: devdata.DeviceData, local_batch: int) -> None:
        self.device_data = device_data
        self.local_batch = local_batch

    def next(self, step: int) -> np.ndarray:
        return self.device_data.indices(step, self.local_batch)

    def get_state(self) -> Any:
        return {}

    def set_state(self, state: Any) -> None:
        pass


class DeviceDataCache:
    """Device-resident datasets kept for the life of their owner (e.g. a search worker),
    so consecutive candidates on the same data do not load it again. Bounded: one entry."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._value: devdata.DeviceData | None = None

    def get(self, key: tuple, make: Callable[[], devdata.DeviceData]) -> devdata.DeviceData:
        if key != self._key:
            self._key, self._value = None, None  # release the old arrays first
            self._value, self._key = make(), key
        return self._value
