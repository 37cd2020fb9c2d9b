"""Pareto curve weights (reference values) and seeded parent selection."""

import dataclasses
import math

import numpy as np
import pytest

from nas.search import Individual, ParetoCurve, SelectionConfig, select_parents
from nas.search.strategy.selection import age

POINTS = [(3, 1), (2, 2), (1, 3), (3, 3)]
R2 = math.sqrt(2)


def test_reference_values_lower_is_better():
    curve = ParetoCurve(POINTS, (False, False))
    np.testing.assert_allclose(curve.points, [(1, 3), (2, 2), (3, 1)])
    w = curve.weights([(3, 1), (2, 2), (1, 3), (3, 3), (1, 1)], normalize=False)
    np.testing.assert_allclose(w, [0, 0, 0, R2, -R2], atol=1e-12)


def test_reference_values_higher_is_better():
    curve = ParetoCurve(POINTS, (True, True))
    np.testing.assert_allclose(curve.points, [(3, 3)])
    w = curve.weights([(3, 1), (2, 2), (1, 3), (3, 3), (4, 4)], normalize=False)
    np.testing.assert_allclose(w, [0, 1, 0, 0, -R2], atol=1e-12)


def test_weights_sign_normalization_and_anchor():
    curve = ParetoCurve([(0.9, 100.0), (0.8, 10.0), (0.5, 50.0)], (True, False))
    assert curve.indices.tolist() == [0, 1]
    np.testing.assert_allclose(curve.normalization(), [0.1, 90.0])
    w = curve.weights([(0.9, 100.0), (0.5, 50.0), (0.95, 5.0)])
    assert w[0] == 0 and w[1] > 0 and w[2] < 0
    # Beyond the front, further out is more negative (monotone).
    far = curve.weights([(0.85, 9.0), (0.85, 5.0), (0.85, 1.0)])
    assert far[0] > far[1] > far[2]
    rng = np.random.default_rng(0)
    anchor = curve.sample_point(rng)
    assert 0.8 <= anchor[0] <= 0.9 and 10.0 <= anchor[1] <= 100.0
    assert curve.weights([anchor], anchor=anchor)[0] == 0


def test_curve_bad_inputs():
    with pytest.raises(ValueError, match="points: empty"):
        ParetoCurve([])
    with pytest.raises(ValueError, match="points: expected shape"):
        ParetoCurve([(1, 2, 3)])
    with pytest.raises(ValueError, match="points: every coordinate must be finite"):
        ParetoCurve([(1, float("nan"))])


def _population(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return [
        Individual(id=i, accuracy=float(rng.uniform(0.5, 1.0)),
                   flops=float(rng.uniform(1e6, 1e8)), params=float(rng.uniform(1e4, 1e6)))
        for i in range(n)
    ]  # fmt: skip


def test_selection_is_reproducible_and_order_independent():
    pop = _population()
    config = SelectionConfig(min_to_select=5)
    a = [select_parents(pop, config, np.random.default_rng(7), num=3) for _ in range(2)]
    b = select_parents(pop[::-1], config, np.random.default_rng(7), num=3)
    assert a[0] == a[1] == b
    assert len(set(a[0])) == 3
    many = {tuple(select_parents(pop, config, np.random.default_rng(s))) for s in range(40)}
    assert len(many) > 1  # the seed matters


def test_selection_prefers_the_front():
    pop = _population(40)
    config = SelectionConfig(top_n=5, min_to_select=1, balanced=False, p_accuracy_only=0.0)
    rng = np.random.default_rng(1)
    picks = [select_parents(pop, config, rng)[0] for _ in range(200)]
    fronts = set()
    for cost in ("flops", "params"):
        curve = ParetoCurve([(p.accuracy, getattr(p, cost)) for p in pop], (True, False))
        w = curve.weights([(p.accuracy, getattr(p, cost)) for p in pop])
        fronts |= {pop[i].id for i in np.argsort(w, kind="stable")[:5]}
    assert set(picks) <= fronts


def test_min_acc_and_missing_costs():
    pop = [Individual(0, 0.4, flops=1.0), Individual(1, 0.9, flops=5.0), Individual(2, 0.3)]
    config = SelectionConfig(min_acc=0.5, costs=("flops",))
    assert select_parents(pop, config, np.random.default_rng(0)) == [1]
    with pytest.raises(ValueError, match="min_acc"):
        select_parents(pop, SelectionConfig(min_acc=0.95), np.random.default_rng(0))
    only_acc = [Individual(0, 0.4), Individual(1, 0.9)]
    with pytest.raises(ValueError, match="cost 'flops'"):
        select_parents(only_acc, SelectionConfig(costs=("flops",), p_accuracy_only=0.0),
                       np.random.default_rng(0))  # fmt: skip


def test_aging_discounts_old_individuals():
    config = SelectionConfig(generations_to_live=10)
    assert age(0.8, 5, config) == pytest.approx(0.8)
    assert age(0.8, 15, config) == pytest.approx(0.1 * 0.8 + 0.9 * 0.8 * 0.5)
    assert age(0.8, 30, config) == pytest.approx(0.08)
    step = SelectionConfig(generations_to_live=10, aging="step")
    assert age(0.8, 9, step) == pytest.approx(0.8) and age(0.8, 10, step) == pytest.approx(0.08)
    # An old champion loses to younger, slightly worse individuals.
    pop = [Individual(0, 0.99, flops=1.0)] + [Individual(i, 0.9, flops=1.0) for i in range(1, 40)]
    cfg = SelectionConfig(generations_to_live=5, top_n=1, min_to_select=1, costs=("flops",))
    assert select_parents(pop, cfg, np.random.default_rng(0)) != [0]
    assert select_parents(pop, SelectionConfig(top_n=1, min_to_select=1, balanced=False,
                                               costs=("flops",)),
                          np.random.default_rng(0)) == [0]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"costs": ("latency",)}, "costs"),
        ({"costs": ()}, "costs"),
        ({"p_accuracy_only": 1.5}, "p_accuracy_only"),
        ({"top_perc": 0.0}, "top_perc"),
        ({"top_n": -1}, "top_n"),
        ({"aging": "linear"}, "aging"),
        ({"min_acc": float("nan")}, "min_acc"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SelectionConfig(**kwargs)


def test_select_bad_inputs():
    with pytest.raises(ValueError, match="population: empty"):
        select_parents([], SelectionConfig(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="num"):
        select_parents(_population(3), SelectionConfig(), np.random.default_rng(0), num=4)
    with pytest.raises(ValueError, match="rng"):
        select_parents(_population(3), SelectionConfig())
    with pytest.raises(ValueError, match=r"config field 'top_k' is unknown; expected one of "):
        SelectionConfig.from_dict({"top_k": 3})
    assert SelectionConfig.from_dict({"costs": ["params"]}).costs == ("params",)


def test_throughput_is_a_cost_where_higher_is_better():
    """images/s/core selects like FLOPs but in the other direction: the slow low-FLOPs
    individual is on the FLOPs front and off the throughput front, the fast costly one the
    other way round."""
    pop = [Individual(0, 0.9, flops=4e7, im_sec_core_train=120.0),
           Individual(1, 0.85, flops=2e7, im_sec_core_train=20.0),  # grouped-conv-like
           Individual(2, 0.5, flops=5e7, im_sec_core_train=300.0)]
    config = SelectionConfig(costs=("im_sec_core_train",), p_accuracy_only=0.0, top_n=2,
                             min_to_select=1, balanced=False)
    picks = {select_parents(pop, config, np.random.default_rng(s))[0] for s in range(30)}
    assert picks == {0, 2}
    by_flops = dataclasses.replace(config, costs=("flops",))
    picks = {select_parents(pop, by_flops, np.random.default_rng(s))[0] for s in range(30)}
    assert picks == {0, 1}
    assert SelectionConfig.from_dict(
        {"costs": ["flops", "im_sec_core_infer"]}).costs == ("flops", "im_sec_core_infer")
