"""Selection on arrays (what the driver keeps per proposal) chooses exactly what the
pairwise, object-by-object rule chose: same curve, same ties, same parents."""

import math

import numpy as np
import pytest

from nas.search import Individual, ParetoCurve, SelectionConfig, select_parents
from nas.search.strategy.noise_ties import NoiseTies
from nas.search.strategy.selection import (
    Columns,
    age,
    aged_values,
    behind_tied_cheaper,
    draw_weighted,
    lowest_rows,
)
from nas.stats.intervals import tied


def _pairwise_curve(points, higher_better):
    """The curve's indices by the definition: sort, keep what beats all before."""
    signs = np.array([1.0 if hb else -1.0 for hb in higher_better])
    std = np.asarray(points, dtype=float) * signs
    keep, best = [], -np.inf
    for i in np.lexsort((-std[:, 1], -std[:, 0])):
        if std[i, 1] > best:
            keep.append(int(i))
            best = std[i, 1]
    return keep


def _population(n, seed, sizes=(143, 360, None)):
    rng = np.random.default_rng(seed)
    acc = np.round(rng.uniform(0.5, 1.0, n) * 143) / 143  # many exact ties
    return [Individual(id=int(i) * 3 + 1, accuracy=float(acc[i]),
                       flops=float(rng.choice([1e6, 2e6, rng.uniform(1e6, 1e8)])),
                       params=None if rng.random() < 0.05 else float(rng.uniform(1e4, 1e6)),
                       examples=sizes[int(rng.integers(len(sizes)))])
            for i in rng.permutation(n)]


@pytest.mark.parametrize("n", [3, 600, 5000])
@pytest.mark.parametrize("higher_better", [(True, False), (True, True), (False, False)])
def test_curve_is_the_sorted_definition(n, higher_better):
    rng = np.random.default_rng(n)
    points = np.round(rng.normal(size=(n, 2)) * 20) / 20  # ties and duplicates
    points[: n // 4] = points[0]
    curve = ParetoCurve(points, higher_better)
    assert curve.indices.tolist() == _pairwise_curve(points, higher_better)
    ge = curve.curve[None, :, :] >= curve.standardize(points)[:, None, :]
    assert curve.dominated(points).tolist() == np.any(np.all(ge, axis=2), axis=1).tolist()


def _pairwise_ties(accuracies, sizes):
    out = list(accuracies)
    order = sorted(range(len(out)), key=lambda i: (-accuracies[i], i))
    grouped = set()
    for head in order:
        if head in grouped:
            continue
        grouped.add(head)
        for other in order:
            if (sizes[head] and sizes[other] and other not in grouped
                    and tied(accuracies[head], sizes[head], accuracies[other], sizes[other])):
                out[other] = out[head]
                grouped.add(other)
    return out


def test_ties_and_aging_match_the_pairwise_rules():
    pop = _population(700, 1)
    acc = [p.accuracy for p in pop]
    sizes = [p.examples for p in pop]
    expected = _pairwise_ties(acc, sizes)
    ties = NoiseTies()
    ties.extend(np.array(acc), np.array([float(s) if s else np.nan for s in sizes]))
    assert ties.values().tolist() == expected
    ids = np.array([p.id for p in pop])
    for config in (SelectionConfig(generations_to_live=50, warm_up=3),
                   SelectionConfig(generations_to_live=40, aging="step"), SelectionConfig()):
        alive = [max(int(np.sum(ids > p.id)) - config.warm_up, 0) for p in pop]
        want = [age(p.accuracy, a, config) for p, a in zip(pop, alive, strict=True)]
        assert aged_values(ids, np.array(acc), config).tolist() == want


def test_behind_tied_cheaper_matches_the_pairwise_rule():
    rng = np.random.default_rng(3)
    points = np.round(rng.uniform(size=(800, 2)) * 30) / 30
    weights = rng.normal(size=800)
    for higher_better in (False, True):
        cost = points[:, 1] * (-1.0 if higher_better else 1.0)
        beaten = np.array([np.any((points[:, 0] >= a) & (cost < c))
                           for a, c in zip(points[:, 0], cost, strict=True)])
        want = np.where(beaten, weights.max() + 1.0 + weights - weights.min(), weights)
        got = behind_tied_cheaper(weights, points, higher_better)
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("config", [
    SelectionConfig(), SelectionConfig(min_acc=0.6, generations_to_live=100),
    SelectionConfig(balanced=False, top_n=7, costs=("params",)),
    SelectionConfig(noise_ties=False, p_accuracy_only=0.5, top_perc=0.3)])
def test_columns_and_individuals_select_alike(config):
    """The same parents from individuals in any order and from their columns; the top-k
    draw without a full sort takes the same k in the same order as a stable argsort."""
    pop = _population(3000, 7)
    columns = Columns.of(pop)
    for seed in range(5):
        a = select_parents(pop, config, np.random.default_rng(seed), num=3)
        b = select_parents(columns, config, np.random.default_rng(seed), num=3)
        assert a == b and len(set(a)) == 3


def test_columns_refuse_what_individuals_refuse():
    with pytest.raises(ValueError, match="population: empty"):
        select_parents(Columns.of([]), SelectionConfig(), np.random.default_rng(0))
    pop = Columns.of([Individual(id=1, accuracy=0.4, flops=1.0)])
    with pytest.raises(ValueError, match="min_acc=0.5"):
        select_parents(pop, SelectionConfig(min_acc=0.5), np.random.default_rng(0))
    with pytest.raises(ValueError, match="cost 'params'"):
        select_parents(pop, SelectionConfig(costs=("params",), p_accuracy_only=0.0),
                       np.random.default_rng(0))
    with pytest.raises(ValueError, match="wilson: accuracy must be a fraction"):
        NoiseTies().extend(np.array([1.5, 0.5]), np.array([10.0, 10.0]))
    assert math.isnan(pop.costs["params"][0])


def test_the_draw_is_numpy_choice_and_any_row_order_ranks_alike():
    """The draw's own inverse CDF picks what `Generator.choice(top, p=...)` picked (and
    leaves the generator where it did), and the k lowest of rows given in any order are
    those a full sort by (weight, row) puts first: the fast draw picks the parents `choice` and
    a full sort would pick."""
    rng = np.random.default_rng(0)
    for trial in range(3000):
        n = int(rng.integers(1, 200))
        w = rng.random(n) if trial % 3 else rng.integers(0, 4, n).astype(float)  # ties
        top = rng.permutation(5 * n)[:n]
        seed = int(rng.integers(2**31))
        ours, numpy_ = np.random.default_rng(seed), np.random.default_rng(seed)
        span = float(w.max() - w.min())
        p = np.power(10.0, -((w - w.min()) / span if span > 0 else np.zeros_like(w)))
        assert draw_weighted(top, w, ours) == int(numpy_.choice(top, p=p / p.sum())), trial
        assert ours.random() == numpy_.random()
        k = int(rng.integers(1, n + 1))
        want = np.lexsort((top, w))[:k]  # by weight, ties by row
        assert np.array_equal(lowest_rows(top, w, k), want), trial
        kth = float(np.sort(w)[k - 1])
        assert np.array_equal(lowest_rows(top, w, k, kth), want), trial
