"""Measured costs within their spread are ties on the fronts parent selection draws from
(`nas.stats.cost_ties`), and a user's cost called with repeats
records a median and its spread."""

import numpy as np
import pytest

import nas
from nas.graph.serialize import graph_to_json
from nas.search.execution.user_functions import CostFailed, measure_costs
from nas.search.strategy.selection import Individual, SelectionConfig, select_parents
from nas.stats.cost_ties import tie_heads, tied_values
from nas.zoo import cnn


def test_costs_within_the_larger_spread_share_their_heads_value():
    values = np.array([1.0, 1.2, 2.0, 1.05, np.nan, 2.1])
    spreads = np.array([0.3, 0.1, 0.05, 0.0, 0.0, np.nan])
    # from the cheapest: 1.0 (spread 0.3) takes 1.05 and 1.2; 2.0 (0.05) leaves 2.1
    assert tie_heads(values, spreads).tolist() == [0, 0, 2, 0, 4, 5]
    assert np.allclose(tied_values(values, spreads), [1.0, 1.0, 2.0, 1.0, np.nan, 2.1],
                       equal_nan=True)
    # no spread: only equal values tie; the group is headed by the first row
    assert tie_heads(np.array([2.0, 1.0, 2.0]), np.zeros(3)).tolist() == [0, 1, 0]
    # higher is better: the head is the largest value
    assert tie_heads(np.array([10.0, 9.5]), np.array([1.0, 1.0]), True).tolist() == [0, 0]


def test_a_head_takes_only_what_it_reaches_not_a_chain():
    values = np.array([1.0, 1.4, 1.8])
    spreads = np.array([0.5, 0.5, 0.5])  # 1.4 ties 1.0; 1.8 is 0.8 from 1.0: its own head
    assert tie_heads(values, spreads).tolist() == [0, 0, 2]


def _pool(iqr):
    # A: more accurate, 1.2 ms; B: less accurate, 1.0 ms; C: far behind on both
    rows = [(1, 0.90, 1.2), (2, 0.80, 1.0), (3, 0.50, 5.0)]
    return [Individual(id=i, accuracy=a, flops=1e6, params=1e5, examples=5000,
                       user_costs={"latency_ms": lat, "latency_ms_iqr": iqr})
            for i, a, lat in rows]


def test_a_front_does_not_order_candidates_by_noise():
    """Within the spread, B's 0.2 ms lead is noise: A (as fast, more accurate) dominates
    it, and the front is A alone. With a tight spread B is on the front too."""
    config = SelectionConfig(costs=("latency_ms",), p_accuracy_only=0.0, top_n=1,
                             min_to_select=1, balanced=False, noise_ties=False)
    tied = {select_parents(_pool(0.5), config, np.random.default_rng(s))[0]
            for s in range(30)}
    assert tied == {1}
    weights = {}
    for s in range(60):
        parent = select_parents(_pool(0.01), SelectionConfig(
            costs=("latency_ms",), p_accuracy_only=0.0, min_to_select=3, balanced=False,
            noise_ties=False), np.random.default_rng(s))[0]
        weights[parent] = weights.get(parent, 0) + 1
    assert weights.get(2, 0) > 0 and weights.get(1, 0) > 0  # both on the front


def _candidate_json():
    graph, constants, _ = cnn.CifarNet()
    return graph_to_json(graph, constants)


TRAIN = {"input": {"image_size": 32}}


class Counter:
    """A cost whose value grows by one each call: the median of 5 calls is the third."""

    def __init__(self):
        self.n = 0

    def __call__(self, candidate):
        self.n += 1
        return float(self.n)


def test_a_cost_with_repeats_gives_its_median_and_spread():
    graph, constants, _ = cnn.CifarNet()
    counter = Counter()
    out = measure_costs({"costs.steps": nas.Cost(counter, repeats=5),
                         "costs.once": lambda c: 7.0}, graph, constants, {}, TRAIN, {})
    assert out == {"steps": 3.0, "steps_iqr": 2.0, "once": 7.0}
    assert counter.n == 5
    with pytest.raises(CostFailed, match="cost 'bad' returned str"):
        measure_costs({"costs.bad": nas.Cost(lambda c: "x", repeats=2)}, graph, constants,
                      {}, TRAIN, {})


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True])
def test_bad_repeats_are_one_line(repeats):
    with pytest.raises(ValueError, match="Cost: repeats must be an integer >= 1"):
        nas.Cost(len, repeats=repeats)


def test_a_cost_is_named_and_digested_as_its_function():
    from nas import functions

    def fn(c):
        return 1.0

    assert functions.name_of(nas.Cost(fn, 3)) == functions.name_of(fn)
    assert functions.digest_of(nas.Cost(fn, 3)) != functions.digest_of(nas.Cost(fn, 5))
    assert functions.digest_of(nas.Cost(fn, 3)) == functions.digest_of(nas.Cost(fn, 3))


def test_the_reports_front_ties_by_the_spread_too():
    from types import SimpleNamespace

    from nas.search.reporting.highlights import front_of

    def candidate(cid, acc, lat, iqr):  # what front_of reads of a study's Candidate
        return SimpleNamespace(id=cid, status="done", accuracy=acc,
                               extra_metrics={"latency_ms": lat, "latency_ms_iqr": iqr})

    tight = [candidate(1, 0.9, 1.2, 0.01), candidate(2, 0.8, 1.0, 0.01)]
    wide = [candidate(1, 0.9, 1.2, 0.5), candidate(2, 0.8, 1.0, 0.5)]
    assert [c.id for c in front_of(tight, "latency_ms")] == [2, 1]
    assert [c.id for c in front_of(wide, "latency_ms")] == [1]


@pytest.mark.parametrize(("iqr", "front"), [(0.5, [1]), (0.01, [1, 2])])
def test_the_store_report_and_dashboard_ring_the_front_selection_ranks(tmp_path, iqr, front):
    """A measured cost within its spread ties on every front a user reads: the study's,
    the report's and the dashboard's pictures, as on the one parents are drawn from."""
    import re

    from nas.search import Study
    from nas.search.reporting.dashboard import Dashboard
    from nas.search.reporting.highlights import front_of
    from tests.search.test_user_costs import CONFIG

    study = Study.create(tmp_path, config=CONFIG)
    for pool_row in _pool(iqr):
        cid = study.add(_candidate_json(), parent_id=None if pool_row.id == 1 else 1,
                        fingerprint=f"{pool_row.id:08x}")
        study.tell(cid, {"accuracy": pool_row.accuracy, "flops": 1e6, "params": 1e5,
                         "latency_ms": pool_row.user_costs["latency_ms"],
                         "latency_ms_iqr": iqr})
    assert [c.id for c in study.pareto_front("latency_ms")] == front
    done = study.candidates("done", with_graphs=False)
    assert sorted(c.id for c in front_of(done, "latency_ms")) == front
    svg = next(p["svg"] for p in Dashboard(study).live.pictures()["plots"]
               if p["cost"] == "latency_ms")
    ringed = re.findall(r'class="point" data-id="(\d+)"[^>]*stroke="#d62728"', svg)
    assert sorted(map(int, ringed)) == front
