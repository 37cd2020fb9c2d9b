"""Training one candidate, as a pure function that any executor can run anywhere.

`train_candidate` takes only plain data (config dict, graph JSON, numpy variables) and
returns plain data, so it runs the same in-process, in a local worker process, in a Ray task
or in an external `nas-train --study` worker. Failures are exceptions with a clear message;
the caller records them.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import ml_collections
import numpy as np


class CandidateTimeout(RuntimeError):
    """The candidate ran past its time limit."""


def train_candidate(
    train_config: dict[str, Any],
    graph_json: str,
    init_variables: dict[str, Any] | None,
    *,
    time_limit_s: float = 0.0,
    workdir: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trains and evaluates a candidate; returns (metrics, final variables as numpy)."""
    import jax

    from nas.graph.serialize import load
    from nas.train import train_and_eval

    graph, constants = load(graph_json)
    config = ml_collections.ConfigDict(train_config)
    start = time.monotonic()
    timed_out = []

    def within_time(epoch: int, metrics: Any) -> bool:
        if time_limit_s and time.monotonic() - start > time_limit_s:
            timed_out.append(epoch)
            return False
        return True

    if workdir:
        os.makedirs(workdir, exist_ok=True)
    metrics, epochs, state = train_and_eval(
        config, eval_perf=True, callback=within_time, graph=graph, constants=constants,
        workdir=workdir, init_variables=init_variables)
    if timed_out:
        raise CandidateTimeout(f"exceeded its time limit of {time_limit_s:.0f} s "
                               f"(stopped after epoch {timed_out[0]})")
    values = metrics_dict(metrics)
    values["epochs"] = epochs
    if not all(math.isfinite(v) for v in values.values() if isinstance(v, float)):
        raise FloatingPointError(f"training diverged: non-finite metrics {values}")
    return values, jax.tree.map(np.asarray, state)


def metrics_dict(metrics: Any) -> dict[str, Any]:
    """The study's metric names (accuracy, params, ...) plus every other measured field."""
    names = {"acc": "accuracy", "num_params": "params"}
    return {names.get(k, k): v for k, v in metrics.to_dict().items()}
