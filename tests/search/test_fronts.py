"""The one front of the search (`nas.search.strategy.pareto`): `front_rows` against the
pairwise definition, and `Front`, grown row by row or in batches, against a recompute."""

import numpy as np
import pytest

from nas.search.strategy.pareto import Front, ParetoCurve, front_rows


def _pairwise(accuracy, values, higher_better):
    """The rows no other row beats on both (equal rows both stay), most accurate first,
    equal points by position."""
    sign = 1.0 if higher_better else -1.0
    on = []
    for i, (a, v) in enumerate(zip(accuracy, values, strict=True)):
        if not (np.isfinite(a) and np.isfinite(v)):
            continue
        beaten = any(np.isfinite(b) and np.isfinite(w) and b >= a and sign * w >= sign * v
                     and (b > a or sign * w > sign * v)
                     for b, w in zip(accuracy, values, strict=True))
        if not beaten:
            on.append(i)
    return sorted(on, key=lambda i: (-accuracy[i], i))


@pytest.mark.parametrize("higher_better", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_front_rows_are_the_pairwise_front_ties_included(seed, higher_better):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    accuracy = rng.choice([0.5, 0.6, 0.7, 0.8, 0.9], n)  # ties in both
    values = rng.choice([1.0, 2.0, 4.0, 8.0, np.nan], n)
    got = front_rows(accuracy, values, higher_better).tolist()
    assert got == _pairwise(accuracy.tolist(), values.tolist(), higher_better)


def test_front_rows_of_nothing_and_of_no_value():
    assert front_rows(np.zeros(0), np.zeros(0)).tolist() == []
    assert front_rows(np.array([0.9, 0.8]), np.array([np.nan, np.nan])).tolist() == []


@pytest.mark.parametrize("higher_better", [False, True])
def test_a_grown_front_is_the_front_of_every_row(higher_better):
    rng = np.random.default_rng(4)
    accuracy = rng.choice(np.linspace(0.5, 0.95, 10), 3000)
    values = np.where(rng.random(3000) < 0.05, np.nan, rng.lognormal(0.0, 0.5, 3000).round(1))
    one_by_one, batches = Front(higher_better), Front(higher_better)
    for end in range(1, len(accuracy) + 1):
        if not np.isnan(values[end - 1]):
            one_by_one.add(accuracy[end - 1], values[end - 1])
        if end % 97 == 0 or end == len(accuracy):
            start = end - 97 if end % 97 == 0 else end - end % 97
            batches.extend(accuracy[start:end], values[start:end])
            rows = front_rows(accuracy[:end], values[:end], higher_better)
            assert one_by_one.size == batches.size == len(rows)
            points = [(float(accuracy[i]), float(values[i])) for i in rows]
            assert one_by_one.points == batches.points == list(dict.fromkeys(points))
            whole = ParetoCurve(np.stack([accuracy[:end], values[:end]], axis=1)[
                ~np.isnan(values[:end])], (True, higher_better))
            np.testing.assert_array_equal(batches.curve().curve, whole.curve)


def test_a_copy_grows_apart():
    front = Front()
    front.extend(np.array([0.9, 0.8, 0.8]), np.array([2.0, 1.0, 1.0]))
    copy = front.copy()
    copy.add(0.95, 0.5)
    assert (front.size, front.points) == (3, [(0.9, 2.0), (0.8, 1.0)])
    assert (copy.size, copy.points) == (1, [(0.95, 0.5)])
