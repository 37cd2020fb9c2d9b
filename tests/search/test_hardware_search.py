"""A hardware-aware search end to end: `nas.run_search` with a FLOPs bound that
leaves out the seed, `latency_ms` timed for every candidate, a user's cost called with
repeats, and the recommendation's cost set from Python."""

import time

import numpy as np
import pytest

import nas
from nas.graph.serialize import load
from nas.search.execution.worker import latency_metrics
from nas.search.strategy import recommend
from nas.search.strategy.settings import SearchSettings
from nas.train.checkpoint import load_variables
from tests.search.conftest import SEARCH_CONFIG, TINY_IMAGE_SIZE

FLOPS_BOUND = 1.6e7  # the digits CifarNet seed at 16x16 has 1.78e7 FLOPs per example


def timed_call_ms(candidate):
    """A user's cost: one batch-1 call of the candidate, in milliseconds (noisy, so it is
    called with repeats and has a spread)."""
    x = np.zeros((1, *candidate.input_shape), np.float32)
    start = time.perf_counter()
    np.asarray(candidate(x))
    return (time.perf_counter() - start) * 1e3


def within_noise(a, a_iqr, b, b_iqr):
    """Two medians agree when they differ by at most twice their spreads together (plus a
    tenth, the timer's resolution at this scale): a tolerance from the IQRs, not a speed."""
    return abs(a - b) <= 2.0 * (a_iqr + b_iqr) + 0.1 * min(a, b)


def _search(folder, finals):
    """The search of this module; `finals`: with finals of one finalist over two folds (they
    read the bound too), six trainings more than the search's two."""
    overrides = {"train.total_epochs": 0.25, "search.seed_epochs": 0.25,
                 "train.input.image_size": TINY_IMAGE_SIZE, "search.seed_max_epochs": 0.0,
                 # the child trains its 0.25 epochs, not the preset's 100 steps at least:
                 # what these tests read (the bound, latency, costs) is the same
                 "search.min_child_steps": 0,
                 "search.finals": {"k": 1, "folds": 2, "min_run_df": 0} if finals else {"k": 0},
                 "train.ckpt_steps": 0, "search.executor": "inline",
                 "search.selection.min_acc": 0.0,
                 "search.selection.recommend_cost": "params",
                 "search.constraints.flops": FLOPS_BOUND,
                 "search.constraints.latency_ms": 1e6,  # met by all: latency is timed
                 "search.latency.min_calls": 20,
                 "search.fit": {"steps": 2, "batches": 1, "batch_size": 8,
                                "bn_batch_size": 16}}
    return nas.run_search("cnn", "digits", workdir=folder / "study", max_candidates=2,
                          config=SEARCH_CONFIG, overrides=overrides,
                          costs={"call_ms": nas.Cost(timed_call_ms, repeats=5)},
                          progress=False)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """Without finals: the tests of what the search times read its candidates only."""
    return _search(tmp_path_factory.mktemp("hardware"), finals=False)


@pytest.fixture(scope="module")
def searched_with_finals(tmp_path_factory):
    return _search(tmp_path_factory.mktemp("hardware_finals"), finals=True)


@pytest.mark.slow
def test_the_bound_and_the_cost_from_python_decide_the_recommendation(searched_with_finals):
    searched = searched_with_finals
    study = searched.study
    search = study.config["search"]
    assert search["selection"]["recommend_cost"] == "params"
    assert search["constraints"] == {"flops": FLOPS_BOUND, "latency_ms": 1e6}
    done = study.candidates("done", with_graphs=False)
    seed = recommend.seed_of(done)
    assert seed.flops > FLOPS_BOUND  # the bound leaves out the seed
    rec = recommend.recommend_for(done, recommend.Comparisons.of(study), study.config)
    assert rec.cost == "params"
    text = searched.summary()
    feasible = [c for c in done if c.flops <= FLOPS_BOUND]
    if feasible:  # a feasible child, never the seed, in the search and in the finals
        assert rec.candidate is not None and rec.candidate.flops <= FLOPS_BOUND
        assert searched.recommended.info["id"] in {c.id for c in feasible}
        assert f"{len(feasible)} of {len(done)} done candidates are within" in text
    else:  # or one line saying none is, with the closest
        assert text.splitlines()[-1].startswith("recommended: none: no done candidate is "
                                                "within search.constraints")


def test_latency_and_its_spread_are_recorded_and_hold_on_remeasurement(searched):
    study = searched.study
    done = study.candidates("done")
    assert study.user_costs == ("call_ms", "latency_ms")
    for c in done:
        m = c.metrics
        assert m["latency_ms"] > 0 and m["latency_ms_iqr"] >= 0 and m["latency_ms_calls"] >= 20
        assert m["call_ms"] > 0 and m["call_ms_iqr"] >= 0  # the user's cost, 5 calls
    c = done[0]
    graph, constants = load(c.graph_json)
    again = latency_metrics(graph, constants, load_variables(c.checkpoint_path),
                            study.config["train"],
                            SearchSettings.from_stored(study.config).latency.task_settings())
    assert within_noise(c.metrics["latency_ms"], c.metrics["latency_ms_iqr"],
                        again["latency_ms"], again["latency_ms_iqr"]), (c.metrics, again)


def test_the_csv_carries_latency_its_spread_and_feasibility(searched):
    import csv
    import io

    from nas.search.reporting.report import to_csv

    rows = list(csv.DictReader(io.StringIO(to_csv(searched.study))))
    assert rows and all(float(r["latency_ms"]) > 0 and r["latency_ms_iqr"] != "" and
                        r["feasible"] in ("0", "1") for r in rows)
    assert {int(r["id"]) for r in rows if r["feasible"] == "1"} == {
        c.id for c in searched.study.candidates("done") if c.flops <= FLOPS_BOUND}
