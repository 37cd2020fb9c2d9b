"""The closest-k search chooses exactly the parents that measuring every row chooses, and
it does answer (the checks that send it back to measuring everything rarely fail)."""

import numpy as np
import pytest

from nas.search.strategy import closest
from nas.search.strategy.closest import CostIndex
from nas.search.strategy.selection import Columns, SelectionConfig, Selector, select_parents


def _population(n, seed):
    """Accuracies on a 143-image grid (many equal), costs with exact twins (the same
    architecture found twice), a few much costlier."""
    rng = np.random.default_rng(seed)
    acc = np.round(np.clip(rng.normal(0.85, 0.06, n), 0.3, 0.99) * 143) / 143
    flops = 1.5e7 * rng.lognormal(0.0, 0.5, n)
    twins = rng.random(n) < 0.1
    flops[twins] = flops[rng.integers(0, n, twins.sum())]
    params = np.round(flops / 100.0)
    return Columns(np.arange(1, n + 1, dtype=np.int64), acc,
                   {"flops": flops, "params": params, "im_sec_core_train": 3e9 / flops,
                    "im_sec_core_infer": 9e9 / flops}, np.full(n, 143.0))


def test_an_index_grown_row_by_row_is_the_index_built_at_once():
    pool = _population(3000, 1)
    first, second = pool.accuracy, -pool.costs["flops"]
    grown = CostIndex(first[:1000], second[:1000])
    for row in range(1000, 3000):
        grown.add(row, float(first[row]), float(second[row]))
    whole = CostIndex(first, second)
    for name in ("rows", "by_row", "second", "starts", "firsts"):
        assert np.array_equal(getattr(grown, name), getattr(whole, name)), name


@pytest.mark.parametrize("config", [
    SelectionConfig(), SelectionConfig(min_acc=0.8, costs=("params",)),
    SelectionConfig(normalize=False, p_accuracy_only=0.0),
    SelectionConfig(costs=("im_sec_core_train",), top_perc=0.3, p_accuracy_only=0.0)])
def test_the_closest_rows_give_the_parents_of_every_row(config, monkeypatch):
    answers = []
    search = CostIndex.closest

    def counted(self, *args):
        found = search(self, *args)
        answers.append(found is not None)
        return found

    monkeypatch.setattr(closest.CostIndex, "closest", counted)
    pool = _population(6000, 2)
    kept = Selector(config)
    for n in (2000, 2001, 2002, 2003, 2010, 4000, 4001, 6000):
        grown = pool.take(slice(0, n))
        for seed in range(6):
            want = select_parents(grown, config, np.random.default_rng([n, seed]))
            assert kept.select(grown, np.random.default_rng([n, seed])) == want, (n, seed)
    assert len(answers) > 20 and np.mean(answers) > 0.9
