"""Training and measurement of candidates: `train_and_eval`, its `TrainOptions` and its
`Metrics`.

Each is imported on first use, so that a leaf such as `nas.train.intervals` (the Wilson
interval the search's reports use) does not pull in JAX, grain and TensorFlow Datasets:
a rerun of a finished search or a report needs none of them.
"""

import importlib
from typing import Any

__all__ = ["Metrics", "TrainOptions", "train_and_eval", "zoo_graph"]

_LAZY = {"Metrics": ("nas.train.perf", "Metrics"),
         "TrainOptions": ("nas.train.options", "TrainOptions"),
         "train_and_eval": ("nas.train.train", "train_and_eval"),
         "zoo_graph": ("nas.train.train", "build_graph")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'nas.train' has no attribute {name!r}")
