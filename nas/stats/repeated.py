"""Paired comparison of architectures trained several times on the same examples.

Why: in the finals each architecture trains `repeats` times (own init and data order; with
cross-validation, own folds), each run predicting every example once. Two noises then move
a difference of accuracies: which examples we had (shared, so paired) and which run we got.
One run's interval (Tango's, `paired`) sees only the first.

The variance of the mean difference has two parts. The example part: the variance of the
per-example mean differences over the number of examples, with one pseudo-example won by
each side (as in add-one adjustments) so it never vanishes. The run part: how lucky a whole
run is, estimated per architecture as the excess of its runs' spread over what their
examples explain; a difference's is two architectures' (`run_noise`). One architecture's
three folds give two degrees of freedom, too few for any power, so the finals pool the
excess over every architecture of their table (same folds, same recipe) and read a t
quantile at the pooled degrees of freedom. That quantile, not Satterthwaite's, kept
coverage at 95 % when the run part is large and its estimate small by chance
(`tests/stats/test_repeated_interval.py` simulates both).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from nas.stats.paired import Paired


@dataclasses.dataclass(frozen=True)
class RunNoise:
    """The variance of a run's mean difference beyond its examples' noise, with `df`
    degrees of freedom."""

    variance: float
    df: int


def run_noise(architectures: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> RunNoise:
    """The run part of a paired difference, pooled over `architectures` ((correct, runs)
    as `compare_repeated` takes them): twice the mean excess (at least 0) of each one's
    run spread over its examples' variance, with all their runs' degrees of freedom."""
    excess, df = [], 0
    for correct, runs in architectures:
        x = np.atleast_2d(np.asarray(correct, dtype=bool)).astype(np.float64)
        runs = np.zeros(x.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
        means, within = _per_run(x, runs)
        if len(means) > 1:
            excess.append(float(np.var(means, ddof=1)) - float(np.mean(within)))
            df += len(means) - 1
    return RunNoise(2.0 * max(0.0, float(np.mean(excess))) if excess else 0.0, df)


def compare_repeated(a: np.ndarray, b: np.ndarray, runs: np.ndarray | None = None,
                     level: float = 0.95, noise: RunNoise | None = None) -> Paired:
    """a against b: boolean (repeats, examples) arrays of which examples each run got
    right, repeat r of a paired with repeat r of b. `runs`: the run (fold) that predicted
    each example in its repeat (None: one per repeat). `noise`: the run part pooled over a
    table (None: from these two alone). `n` counts predictions (repeats x examples)."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    b = np.atleast_2d(np.asarray(b, dtype=bool))
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired repeats need equal non-empty shapes, got {a.shape} and "
                         f"{b.shape}")
    runs = np.zeros(a.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
    if runs.shape != a.shape:
        raise ValueError(f"runs has shape {runs.shape}, expected {a.shape}")
    d = a.astype(np.float64) - b.astype(np.float64)
    noise = noise if noise is not None else run_noise([(a, runs), (b, runs)])
    low, high = _interval(d, runs, level, (1.0, -1.0), noise)
    return Paired(float(d.mean()), max(-1.0, low), min(1.0, high), int(a.size),
                  int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b)))


def accuracy_interval(a: np.ndarray, runs: np.ndarray | None = None, level: float = 0.95
                      ) -> Paired:
    """One architecture's accuracy over its repeats (`difference`: the mean) with its
    interval, by the same two-part variance; `a` and `runs` as `compare_repeated`'s."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    runs = np.zeros(a.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
    pooled = run_noise([(a, runs)])
    noise = RunNoise(pooled.variance / 2.0, pooled.df)  # one architecture's runs
    low, high = _interval(a.astype(np.float64), runs, level, (1.0, 0.0), noise)
    return Paired(float(a.mean()), max(0.0, low), min(1.0, high), int(a.size), 0, 0)


def _per_run(d: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each run's mean of `d` over its examples, and that mean's variance from them."""
    means, within = [], []
    for r in range(d.shape[0]):
        for run in np.unique(runs[r]):
            x = d[r][runs[r] == run]
            means.append(x.mean())
            within.append(x.var(ddof=1) / x.size if x.size > 1 else 0.0)
    return np.asarray(means), np.asarray(within)


def _interval(d: np.ndarray, runs: np.ndarray, level: float, pseudo: tuple[float, float],
              noise: RunNoise) -> tuple[float, float]:
    """(low, high) around d's mean: the example part (`pseudo` examples added) plus the
    run part, at a t quantile of the run part's degrees of freedom (else the examples')."""
    n = d.shape[1]
    per_example = np.concatenate([d.mean(axis=0), pseudo])
    examples_var = float(per_example.var(ddof=1)) / n
    sizes = np.asarray([np.count_nonzero(runs[r] == run) for r in range(d.shape[0])
                        for run in np.unique(runs[r])], dtype=np.float64)
    runs_var = noise.variance * float(np.sum((sizes / sizes.sum()) ** 2))
    df = noise.df if noise.df > 0 else n
    # the inverse t CDF: scipy.stats.t.ppf's value, without the second that importing
    # scipy.stats adds to every search process
    half = float(special.stdtrit(df, 0.5 + level / 2)) * math.sqrt(examples_var + runs_var)
    return float(d.mean()) - half, float(d.mean()) + half
