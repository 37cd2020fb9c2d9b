"""Coverage of the finals' paired interval over repeats and examples, by simulation at the
counts the finals run at (a few repeats, folds or not, tens to thousands of examples)."""

import numpy as np
import pytest

from nas.search.strategy.repeated import compare_repeated


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _world(rng: np.random.Generator, n: int, repeats: int, folds: int, run_sd: float,
           gap: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two architectures' correctness on n examples drawn from one population: each example
    has a difficulty shared by both and a part only architecture a feels; each training
    run (a fold of a repeat) is lucky or not for every example it predicts."""
    difficulty = rng.normal(2.0, 1.5, n)
    own = rng.normal(0.0, 0.7, n)
    runs = np.stack([rng.permutation(n) % folds for _ in range(repeats)])
    run_a = np.take_along_axis(rng.normal(0.0, run_sd, (repeats, folds)), runs, 1)
    run_b = np.take_along_axis(rng.normal(0.0, run_sd, (repeats, folds)), runs, 1)
    a = rng.random((repeats, n)) < _sigmoid(difficulty + own + gap + run_a)
    b = rng.random((repeats, n)) < _sigmoid(difficulty + run_b)
    return a, b, runs


def _truth(run_sd: float, gap: float) -> float:
    rng = np.random.default_rng(123)
    m = 1_000_000
    difficulty, own = rng.normal(2.0, 1.5, m), rng.normal(0.0, 0.7, m)
    run_a, run_b = rng.normal(0.0, run_sd, m), rng.normal(0.0, run_sd, m)
    return float(np.mean(_sigmoid(difficulty + own + gap + run_a)
                         - _sigmoid(difficulty + run_b)))


@pytest.mark.parametrize("n, repeats, folds, run_sd, gap", [
    (143, 2, 1, 0.5, -0.5), (143, 2, 3, 0.5, -0.5), (300, 1, 3, 0.5, 0.0),
    (143, 3, 1, 0.3, 0.0), (200, 2, 3, 0.0, 0.0), (100, 2, 2, 0.8, 0.3),
    (1437, 2, 3, 0.3, 0.0)])
def test_interval_covers_the_true_difference_at_small_counts(n, repeats, folds, run_sd, gap):
    truth = _truth(run_sd, gap)
    rng = np.random.default_rng([n, repeats, folds])
    sims = 600
    covered = sum(found.low <= truth <= found.high for found in (
        compare_repeated(*_world(rng, n, repeats, folds, run_sd, gap)) for _ in range(sims)))
    assert covered / sims >= 0.93, (covered / sims, truth)


def test_no_disagreement_still_has_an_interval():
    same = np.ones((2, 50), dtype=bool)
    found = compare_repeated(same, same)
    assert found.difference == 0.0 and found.low < 0.0 < found.high


def test_counts_and_shape_errors():
    a = np.array([[1, 1, 0], [1, 0, 0]], dtype=bool)
    b = np.array([[1, 0, 0], [0, 0, 1]], dtype=bool)
    found = compare_repeated(a, b)
    assert (found.n, found.only_a, found.only_b) == (6, 2, 1)
    assert found.difference == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="equal non-empty shapes"):
        compare_repeated(a, b[:, :2])
    with pytest.raises(ValueError, match="runs has shape"):
        compare_repeated(a, b, runs=np.zeros((1, 3)))
