"""Paired comparison of architectures trained several times on the same examples.

Why: in the finals (`nas.search.execution.finals`) each architecture is trained `repeats`
times (different initialization and data order; with cross-validation, different folds),
and every training predicts every example once. Two sources of noise then move the
difference of accuracies: which examples we happened to have (the same for both, so they
pair) and which training run we happened to get. One run's interval (Tango's, `paired`)
sees only the first.

The variance of the mean difference here has two parts. The example part is the variance
of the per-example mean differences (across repeats) over the number of examples; like the
add-one adjustments for paired proportions, one pseudo-example won by each side keeps it
from vanishing when the two never disagree. It already holds the noise of which examples a
run happens to get right, since every run predicts its examples once. The run part is what
is left: how much a whole run is lucky or not for every example it predicts. Each
architecture's runs (a repeat, or a fold of a repeat) are lucky on their own, so per
architecture the spread of its runs' accuracies is their examples' variance plus its run
variance, and the run variance is estimated as the excess of the one over the other; a
difference's run part is two architectures' (`run_noise`). With three folds one
architecture gives it two degrees of freedom, and a t quantile of 4.3 on them leaves no
power to find a finalist non-inferior. So the finals pool the excess over every
architecture of their table (the same folds, the same recipe, so the same kind of run
luck), and the whole interval reads a t quantile at the pooled degrees of freedom. That
quantile, not one from the Satterthwaite degrees of freedom of the two parts, is what kept
coverage at 95 % when the run part is large and its estimate small (truncated at 0) by
chance; pooling over architectures rather than over comparisons with the seed counts each
run once, and gave a lone finalist four degrees of freedom instead of two.
Coverage and power are checked by simulation at the finals' counts, with training noise
of both kinds, in `tests/search/test_repeated_interval.py`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from nas.search.strategy.paired import Paired


@dataclasses.dataclass(frozen=True)
class RunNoise:
    """The variance of one training run's mean difference beyond its examples' noise
    (`variance`), estimated with `df` degrees of freedom."""

    variance: float
    df: int


def run_noise(architectures: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> RunNoise:
    """The run part of a paired difference, pooled over `architectures` ((correct, runs)
    of each, as `compare_repeated` takes them): each architecture's runs are lucky or not
    on their own (their own initialization), so a difference's run part is the sum of two
    architectures' run variances. Each is the excess of the spread of its runs' accuracies
    over what their examples explain; the pooled one is their mean (at least 0), twice
    over for a difference, with the degrees of freedom of all architectures' runs."""
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
    right, repeat r of a paired with repeat r of b (same seeds, same folds). `runs`
    (repeats, examples) names the training run (the fold) that predicted each example in
    its repeat; None: one run per repeat. `noise`: the run part pooled over a table
    (`run_noise`); None: from this comparison alone. The result's `n` counts predictions
    (repeats x examples); `only_a`, `only_b` the disagreements."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    b = np.atleast_2d(np.asarray(b, dtype=bool))
    d, runs = _difference(a, b, runs)
    noise = noise if noise is not None else run_noise([(a, runs), (b, runs)])
    low, high = _interval(d, runs, level, (1.0, -1.0), noise)
    return Paired(float(d.mean()), max(-1.0, low), min(1.0, high), int(a.size),
                  int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b)))


def accuracy_interval(a: np.ndarray, runs: np.ndarray | None = None, level: float = 0.95
                      ) -> Paired:
    """One architecture's accuracy over its repeats (`difference`: the mean, `low`, `high`
    its interval), by the same two-part variance (its own runs' excess): `a` and `runs` as
    `compare_repeated` takes them."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    runs = np.zeros(a.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
    pooled = run_noise([(a, runs)])
    noise = RunNoise(pooled.variance / 2.0, pooled.df)  # one architecture's runs
    low, high = _interval(a.astype(np.float64), runs, level, (1.0, 0.0), noise)
    return Paired(float(a.mean()), max(0.0, low), min(1.0, high), int(a.size), 0, 0)


def _difference(a: np.ndarray, b: np.ndarray, runs: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray]:
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    b = np.atleast_2d(np.asarray(b, dtype=bool))
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired repeats need equal non-empty shapes, got {a.shape} and "
                         f"{b.shape}")
    runs = np.zeros(a.shape, np.int64) if runs is None else np.asarray(runs, np.int64)
    if runs.shape != a.shape:
        raise ValueError(f"runs has shape {runs.shape}, expected {a.shape}")
    return a.astype(np.float64) - b.astype(np.float64), runs


def _per_run(d: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each training run's mean of `d` over its examples, and that mean's variance from
    its examples alone."""
    means, within = [], []
    for r in range(d.shape[0]):
        for run in np.unique(runs[r]):
            x = d[r][runs[r] == run]
            means.append(x.mean())
            within.append(x.var(ddof=1) / x.size if x.size > 1 else 0.0)
    return np.asarray(means), np.asarray(within)


def _interval(d: np.ndarray, runs: np.ndarray, level: float, pseudo: tuple[float, float],
              noise: RunNoise) -> tuple[float, float]:
    """(low, high) around d's mean: the example part (with `pseudo` examples added) plus
    the run part, read at a t quantile with the run part's degrees of freedom (the
    examples' own where there is no run part to estimate, a single run)."""
    n = d.shape[1]
    per_example = np.concatenate([d.mean(axis=0), pseudo])
    examples_var = float(per_example.var(ddof=1)) / n
    sizes = np.asarray([np.count_nonzero(runs[r] == run) for r in range(d.shape[0])
                        for run in np.unique(runs[r])], dtype=np.float64)
    runs_var = noise.variance * float(np.sum((sizes / sizes.sum()) ** 2))
    df = noise.df if noise.df > 0 else n
    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(examples_var + runs_var)
    return float(d.mean()) - half, float(d.mean()) + half
