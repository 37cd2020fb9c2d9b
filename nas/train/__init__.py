"""Training and measurement of candidates: `train_and_eval` and its `Metrics`."""

from nas.train.perf import Metrics
from nas.train.train import build_graph as zoo_graph
from nas.train.train import train_and_eval

__all__ = ["Metrics", "train_and_eval", "zoo_graph"]
