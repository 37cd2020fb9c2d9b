"""Paired comparison of two architectures trained several times on the same examples.

Why: in the finals (`nas.search.execution.finals`) each architecture is trained `repeats`
times (different initialization and data order; with cross-validation, different folds),
and every training predicts every example once. Two sources of noise then move the
difference of accuracies: which examples we happened to have (the same for both, so they
pair) and which training run we happened to get (a whole run is lucky or not, for every
example at once). One run's interval (Tango's, `paired`) sees only the first.

The interval here adds the two parts. The example part is the variance of the per-example
mean differences (across repeats) over the number of examples, read at a t quantile; like
the add-one adjustments for paired proportions, one pseudo-example won by each side keeps
it from vanishing when the two never disagree. The run part treats each training run (a
repeat, or a fold of a repeat under cross-validation) as a cluster: the variance of the
runs' mean differences over the number of runs, read at a t quantile with runs - 1
degrees of freedom. That spread still holds the examples' own noise, so the run part
counts some of it twice: conservative, and deliberately so. Subtracting it (a moment
estimate) left the run part at zero too often with two to six runs, and coverage fell to
0.89. With a single run (one repeat, no folds) the run part is not seen at all.
Coverage is checked by simulation at small counts in `tests/search/test_repeated_interval.py`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from nas.search.strategy.paired import Paired


def compare_repeated(a: np.ndarray, b: np.ndarray, runs: np.ndarray | None = None,
                     level: float = 0.95) -> Paired:
    """a against b: boolean (repeats, examples) arrays of which examples each run got
    right, repeat r of a paired with repeat r of b (same seeds, same folds). `runs`
    (repeats, examples) names the training run (the fold) that predicted each example in
    its repeat; None: one run per repeat. The result's `n` counts predictions (repeats x
    examples); `only_a`, `only_b` the disagreements."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    b = np.atleast_2d(np.asarray(b, dtype=bool))
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired repeats need equal non-empty shapes, got {a.shape} and "
                         f"{b.shape}")
    repeats, n = a.shape
    runs = np.zeros(a.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
    if runs.shape != a.shape:
        raise ValueError(f"runs has shape {runs.shape}, expected {a.shape}")
    d = a.astype(np.float64) - b.astype(np.float64)
    low, high = _interval(d, runs, level, pseudo=(1.0, -1.0))
    return Paired(float(d.mean()), max(-1.0, low), min(1.0, high), int(a.size),
                  int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b)))


def accuracy_interval(a: np.ndarray, runs: np.ndarray | None = None, level: float = 0.95
                      ) -> Paired:
    """One architecture's accuracy over its repeats (`difference`: the mean, `low`, `high`
    its interval), by the same two-part variance: `a` and `runs` as `compare_repeated`
    takes them."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    runs = np.zeros(a.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
    low, high = _interval(a.astype(np.float64), runs, level, pseudo=(1.0, 0.0))
    return Paired(float(a.mean()), max(0.0, low), min(1.0, high), int(a.size), 0, 0)


def _interval(d: np.ndarray, runs: np.ndarray, level: float, pseudo: tuple[float, float]
              ) -> tuple[float, float]:
    """(low, high) around d's mean: the example part (with `pseudo` examples added) and
    the run part, each at its own t quantile."""
    n = d.shape[1]
    per_example = np.concatenate([d.mean(axis=0), pseudo])
    var_examples = float(per_example.var(ddof=1)) / n
    var_runs, clusters = _run_variance(d, runs)
    q = 0.5 + level / 2
    half = math.hypot(float(stats.t.ppf(q, n)) * math.sqrt(var_examples),
                      float(stats.t.ppf(q, max(1, clusters - 1))) * math.sqrt(var_runs))
    return float(d.mean()) - half, float(d.mean()) + half


def _run_variance(d: np.ndarray, runs: np.ndarray) -> tuple[float, int]:
    """(variance of the mean difference from the spread of the training runs' mean
    differences, number of runs)."""
    means = [d[r][runs[r] == run].mean() for r in range(d.shape[0])
             for run in np.unique(runs[r])]
    if len(means) < 2:
        return 0.0, len(means)
    return float(np.var(means, ddof=1)) / len(means), len(means)
