"""Tie groups kept row by row equal the rule applied to the whole population at once:
the pairwise definition, with Wilson intervals or, where two rows hold per-example
results on the same examples, McNemar's exact test (`paired.mcnemar`)."""

import numpy as np
import pytest

from nas.search.strategy.noise_ties import NoiseTies
from nas.stats import paired
from nas.stats.intervals import tied
from nas.stats.paired import McNemarBounds


def _rows(n, seed, with_bits=0.7, count=143):
    """Accuracies on a 143-image grid, some sizes unknown, most with correctness vectors
    correlated with a shared 'easy images' pattern (as candidates of one search are)."""
    rng = np.random.default_rng(seed)
    easy = rng.random(count)
    correct = np.stack([easy < rng.uniform(0.5, 1.0) + rng.normal(0, 0.05, count)
                        for _ in range(n)])
    acc = correct.mean(axis=1)
    sizes = np.where(rng.random(n) < 0.05, np.nan, float(count))
    has = rng.random(n) < with_bits
    counts = np.where(has, count, 0)
    return acc, sizes, correct, counts


def _pairwise(acc, sizes, correct, counts, memo=None):
    """The greedy definition, one pair at a time, through `paired.mcnemar` itself."""
    memo = {} if memo is None else memo
    n = len(acc)
    out = acc.copy()
    order = sorted(range(n), key=lambda i: (-acc[i], i))
    grouped = set()

    def ties(h, r):
        if np.isnan(sizes[h]) or np.isnan(sizes[r]):
            return False
        if counts[h] and counts[h] == counts[r]:
            if (h, r) not in memo:
                memo[h, r] = paired.mcnemar(correct[h], correct[r])
            return memo[h, r] == "within noise"
        return tied(acc[h], int(sizes[h]), acc[r], int(sizes[r]))

    for head in order:
        if head in grouped:
            continue
        grouped.add(head)
        for other in order:
            if other not in grouped and acc[other] <= acc[head] and ties(head, other):
                out[other] = out[head]
                grouped.add(other)
    return out


def _packed(correct, counts):
    return np.where(counts[:, None] > 0, np.packbits(correct, axis=1), 0).astype(np.uint8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_all_at_once_and_row_by_row_match_the_pairwise_rule(seed):
    acc, sizes, correct, counts = _rows(160, seed)
    memo = {}
    want = _pairwise(acc, sizes, correct, counts, memo)
    whole = NoiseTies()
    whole.extend(acc, sizes, _packed(correct, counts), counts)
    assert whole.values().tolist() == want.tolist()
    grown = NoiseTies()
    grown.extend(acc[:100], sizes[:100], _packed(correct[:100], counts[:100]), counts[:100])
    for i in range(100, len(acc), 3):  # one to three rows at a time, as results arrive
        j = min(i + 3, len(acc))
        grown.extend(acc[i:j], sizes[i:j], _packed(correct[i:j], counts[i:j]), counts[i:j])
        expected = _pairwise(acc[:j], sizes[:j], correct[:j], counts[:j], memo)
        assert grown.values().tolist() == expected.tolist(), j


def test_without_correctness_the_groups_are_the_wilson_ones():
    acc, sizes, correct, _ = _rows(300, 5)
    none = np.zeros(len(acc), dtype=np.int64)
    ties = NoiseTies()
    ties.extend(acc, sizes)
    assert ties.values().tolist() == _pairwise(acc, sizes, correct, none).tolist()


def test_paired_ties_are_tighter_than_wilson_ones_on_correlated_models():
    """Most images right for both: the paired test separates what Wilson intervals tie."""
    acc, sizes, correct, counts = _rows(200, 9, with_bits=1.0)
    with_bits, wilson = NoiseTies(), NoiseTies()
    with_bits.extend(acc, sizes, _packed(correct, counts), counts)
    wilson.extend(acc, sizes)
    assert len(set(with_bits.head.tolist())) > len(set(wilson.head.tolist()))


def test_mcnemar_bounds_agree_with_the_exact_test():
    bounds = McNemarBounds()
    for m in range(0, 40):
        for k in range(0, m + 1):
            a = np.zeros(143, dtype=bool)
            b = np.zeros(143, dtype=bool)
            a[:k] = True
            b[k:m] = True
            decision = paired.mcnemar(a, b)
            assert bounds.within(np.array([k]), np.array([m]))[0] == (
                decision == "within noise"), (k, m)


def test_the_span_bounds_every_tie():
    bounds = McNemarBounds()
    for accuracy in (0.99, 0.9, 0.6, 0.3):
        for m in range(0, 143):
            for k in range(m // 2, m + 1):  # the head at least as accurate
                if bounds.within(np.array([k]), np.array([m]))[0]:
                    assert (2 * k - m) / 143 <= bounds.span(accuracy, 143) or m > 143 * (
                        2 - 2 * accuracy + (2 * k - m) / 143)


def _population(seed: int, below_min_acc: int | None = None):
    """400 candidates' `Columns` with per-example results (`_rows`) and random FLOPs and
    parameters; `below_min_acc`: the row set to accuracy 0.1, under every other one."""
    from nas.search.strategy.selection import Columns

    acc, sizes, correct, counts = _rows(400, seed)
    if below_min_acc is not None:
        assert acc.min() >= 0.3
        acc[below_min_acc] = 0.1
    rng = np.random.default_rng(seed)
    return Columns(np.arange(1, 401, dtype=np.int64), acc,
                   {"flops": rng.uniform(1e6, 1e8, 400), "params": rng.uniform(1e4, 1e6, 400),
                    "im_sec_core_train": np.full(400, np.nan),
                    "im_sec_core_infer": np.full(400, np.nan)},
                   sizes, counts, _packed(correct, counts))


def test_a_kept_selector_chooses_what_a_fresh_selection_chooses():
    """The driver's selector, fed a population that grows, keeps its pool and ties; each
    call chooses the parents `select_parents` chooses from scratch (paired ties too)."""
    from nas.search.strategy.selection import SelectionConfig, Selector, select_parents

    columns = _population(4)
    for config in (SelectionConfig(min_acc=0.6), SelectionConfig(generations_to_live=30),
                   SelectionConfig(noise_ties=False, balanced=False, p_accuracy_only=0.0)):
        kept = Selector(config)
        for n in (50, 51, 52, 60, 200, 201, 202, 203, 260, 400):
            pool = columns.take(slice(0, n))
            for seed in range(3):
                want = select_parents(pool, config, np.random.default_rng([n, seed]), num=2)
                got = kept.select(pool, np.random.default_rng([n, seed]), num=2)
                assert got == want, (config, n, seed)
        shrunk = columns.take(np.arange(400) % 7 != 3)  # a parent marked unusable: regrouped
        assert kept.select(shrunk, np.random.default_rng(1)) == select_parents(
            shrunk, config, np.random.default_rng(1))


def test_a_kept_selector_over_rows_grown_in_place_chooses_as_a_fresh_selection():
    """The driver's selector is given the population's own columns (`DoneCache`'s, grown in
    place); before and after a row below min_acc is left out of its pool, it chooses the
    parents a fresh selection chooses."""
    from nas.search.strategy.selection import (
        GrowingColumns,
        SelectionConfig,
        Selector,
        select_parents,
    )

    rows = _population(5, below_min_acc=300)  # candidate 301: left out of the pool
    for config in (SelectionConfig(min_acc=0.3), SelectionConfig(min_acc=0.3, noise_ties=False),
                   SelectionConfig(min_acc=0.3, generations_to_live=30)):
        grown, kept, read = GrowingColumns(), Selector(config), 0
        for n in (50, 51, 60, 200, 300, 301, 302, 400):
            grown.extend(rows.take(slice(read, n)))  # as the driver's DoneCache appends
            read, pool = n, grown.columns
            for seed in range(3):
                want = select_parents(pool, config, np.random.default_rng([n, seed]), num=2)
                got = kept.select(pool, np.random.default_rng([n, seed]), num=2)
                assert got == want, (config, n, seed)
