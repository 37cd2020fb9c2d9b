"""Training and measurement of candidates: `train_and_eval`, its `TrainOptions` and its
`Metrics`.

Each is imported on first use, so that a leaf such as `nas.train.recipes` (the training
recipes a search config starts from) does not pull in JAX, grain and TensorFlow Datasets:
a rerun of a finished search or a report needs none of them. The imports are statements
inside `__getattr__` (the pattern `nas` uses too), so that `tests/test_layering.py` sees
them.
"""

from typing import Any

__all__ = ["Metrics", "TrainOptions", "train_and_eval", "zoo_graph"]

_RENAMED = {"zoo_graph": "build_graph"}  # exported name: name in its module


def __getattr__(name: str) -> Any:
    if name == "Metrics":
        from nas.train import perf as module
    elif name == "TrainOptions":
        from nas.train import options as module
    elif name in ("train_and_eval", "zoo_graph"):
        from nas.train import train as module
    else:
        raise AttributeError(f"module 'nas.train' has no attribute {name!r}")
    return getattr(module, _RENAMED.get(name, name))
