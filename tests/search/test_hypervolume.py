"""Hypervolume of an accuracy/cost front (the benchmark's measure of a search)."""

import pytest

from nas.search.strategy.pareto import hypervolume


def test_hypervolume_of_a_staircase():
    assert hypervolume([(0.9, 50.0)], (0.0, 100.0)) == pytest.approx(45.0)
    # (0.5, 90) is dominated; (0.95, 80) adds the strip between costs 80 and 100
    front = [(0.9, 50.0), (0.95, 80.0), (0.5, 90.0)]
    assert hypervolume(front, (0.0, 100.0)) == pytest.approx(0.9 * 30 + 0.95 * 20)


def test_points_beyond_the_reference_add_nothing():
    assert hypervolume([(0.9, 150.0)], (0.0, 100.0)) == 0.0
    assert hypervolume([], (0.0, 100.0)) == 0.0


def test_both_higher_better():
    assert hypervolume([(2.0, 3.0)], (0.0, 0.0), (True, True)) == pytest.approx(6.0)


def test_bad_points_are_value_errors():
    with pytest.raises(ValueError, match="points"):
        hypervolume([(1.0, float("nan"))], (0.0, 1.0))
