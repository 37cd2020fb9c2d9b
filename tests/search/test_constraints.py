"""Bounds on costs (`search.constraints`): constrained domination in parent selection,
the recommendation among feasible candidates only, the counts in the summary, CSV and
dashboard, and one line for each bad bound. The Study is real SQLite; no
training here (tests/search/test_hardware_search.py runs a search)."""

import csv
import json
import math
import runpy

import ml_collections
import numpy as np
import pytest

from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.inputs import apply_overrides, split_open_overrides
from nas.search.reporting.dashboard import overview
from nas.search.reporting.report import write_report
from nas.search.reporting.report_text import summary
from nas.search.strategy import recommend
from nas.search.strategy.constraints import (
    check_constraints,
    constrained_dominates,
    constrained_order,
    violation,
    violations,
)
from nas.search.strategy.selection import Individual, SelectionConfig, select_parents
from nas.search.strategy.settings import validate_search
from nas.zoo import cnn
from tests.search.conftest import SEARCH_CONFIG, run_cli_probe


def test_constrained_domination_is_debs_rule():
    up = (True, False)  # accuracy up, cost down
    # feasible beats infeasible whatever the objectives say
    assert constrained_dominates((0.5, 9.0), (0.9, 1.0), 0.0, 0.1, up)
    assert not constrained_dominates((0.9, 1.0), (0.5, 9.0), 0.1, 0.0, up)
    # among infeasible the smaller total violation wins, objectives aside
    assert constrained_dominates((0.1, 9.0), (0.9, 1.0), 0.2, 0.5, up)
    assert not constrained_dominates((0.9, 1.0), (0.1, 9.0), 0.5, 0.2, up)
    assert not constrained_dominates((0.9, 1.0), (0.9, 1.0), 0.3, 0.3, up)
    # among feasible: Pareto domination
    assert constrained_dominates((0.9, 1.0), (0.8, 2.0), 0.0, 0.0, up)
    assert not constrained_dominates((0.9, 3.0), (0.8, 2.0), 0.0, 0.0, up)
    assert not constrained_dominates((0.9, 1.0), (0.9, 1.0), 0.0, 0.0, up)


def test_violations_are_normalized_by_the_bound_and_missing_is_infinite():
    costs = {"flops": np.array([50.0, 150.0, 300.0, np.nan]),
             "latency_ms": np.array([1.0, 1.0, 4.0, 1.0])}
    bounds = {"flops": 100.0, "latency_ms": 2.0}
    v = violations(costs, bounds, 4)
    assert v[:3].tolist() == pytest.approx([0.0, 0.5, 2.0 + 1.0])
    assert math.isinf(v[3])
    assert violation({"flops": 150.0, "latency_ms": None}, bounds) == math.inf
    assert violation({"flops": 0.0}, {"flops": 0.0}) == 0.0  # a bound of 0 is met by 0
    # feasible rows keep their weights and come first; infeasible ones by violation
    order = constrained_order(np.array([0.0, 0.5, 2.0, math.inf]), np.array([3.0, 0.0, 0.0, 0.0]))
    assert np.argsort(order, kind="stable").tolist() == [0, 1, 2, 3]


def _population(rows):
    """rows: (id, accuracy, flops, latency_ms, latency_ms_iqr)."""
    return [Individual(id=i, accuracy=a, flops=f, params=f / 10, examples=500,
                       user_costs={"latency_ms": lat, "latency_ms_iqr": iqr})
            for i, a, f, lat, iqr in rows]


# The most accurate are over a 100-FLOPs bound; 4 and 5 are within it.
BOUNDED = _population([(1, 0.95, 400.0, 1.0, 0.0), (2, 0.93, 300.0, 1.0, 0.0),
                       (3, 0.90, 150.0, 1.0, 0.0), (4, 0.70, 90.0, 1.0, 0.0),
                       (5, 0.60, 50.0, 1.0, 0.0)])


def test_parents_are_feasible_while_any_candidate_is():
    config = SelectionConfig(costs=("flops",), min_to_select=5, noise_ties=False,
                             constraints={"flops": 100.0})
    for seed in range(40):
        (parent,) = select_parents(BOUNDED, config, np.random.default_rng(seed))
        assert parent in (4, 5)
    # more parents than feasible candidates: the rest by least violation (3 then 2)
    three = select_parents(BOUNDED, SelectionConfig(
        costs=("flops",), top_n=1, min_to_select=1, noise_ties=False, constraints={"flops": 100.0}),
        np.random.default_rng(0), num=3)
    assert sorted(three[:2]) == [4, 5] and three[2] == 3


def test_with_none_feasible_the_least_violating_is_drawn():
    config = SelectionConfig(costs=("flops",), top_n=1, min_to_select=1, noise_ties=False,
                             constraints={"flops": 10.0})
    for seed in range(10):
        assert select_parents(BOUNDED, config, np.random.default_rng(seed)) == [5]


def test_bounds_every_candidate_meets_change_no_parent():
    plain = SelectionConfig(costs=("flops", "params"), min_to_select=5)
    bounded = SelectionConfig(costs=("flops", "params"), min_to_select=5,
                              constraints={"flops": 1e9, "params": 1e9})
    for seed in range(20):
        assert (select_parents(BOUNDED, plain, np.random.default_rng(seed), num=2)
                == select_parents(BOUNDED, bounded, np.random.default_rng(seed), num=2))


def test_a_latency_bound_or_front_makes_latency_a_column():
    assert SelectionConfig(constraints={"latency_ms": 2.0}).user_costs == ("latency_ms",)
    assert SelectionConfig(costs=("latency_ms",)).user_costs == ("latency_ms",)
    assert SelectionConfig().user_costs == ()


@pytest.mark.parametrize("bounds, match", [
    ({"energy": 1.0}, r"^search\.constraints\.energy: unknown cost 'energy'; a bound applies "
     r"to one of \('flops', 'params', 'latency_ms'\)"),
    ({"flops": -1.0}, r"^search\.constraints\.flops: expected an upper bound, a finite "
     r"number >= 0, got -1"),
    ({"flops": "lots"}, r"^search\.constraints\.flops: expected an upper bound.*'lots'"),
    ({"params": math.inf}, r"^search\.constraints\.params: expected an upper bound"),
    ({"params": True}, r"^search\.constraints\.params: expected an upper bound"),
    ({"im_sec_core_train": 5.0}, r"^search\.constraints\.im_sec_core_train: unknown cost"),
    ({"\n": 0}, r"^search\.constraints\['\\n'\]: unknown cost '\\n'"),
])
def test_each_bad_bound_is_one_line(bounds, match):
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.search.constraints = ml_collections.ConfigDict(bounds)
    with pytest.raises(ValueError, match=match) as e:
        validate_search(config)
    assert "\n" not in str(e.value)


def test_a_users_cost_may_be_bounded():
    assert check_constraints({"energy": 3}, ["flops", "energy"]) == {"energy": 3.0}


def test_bounds_from_overrides_and_the_command_line_reach_the_config():
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    apply_overrides(config, {"search.constraints.latency_ms": 2.0,
                             "search.selection.recommend_cost": "params"})
    assert config.search.constraints.to_dict() == {"latency_ms": 2.0}
    assert config.search.selection.recommend_cost == "params"
    with pytest.raises(ValueError, match="unknown key 'search.constrain.flops'"):
        apply_overrides(config, {"search.constrain.flops": 1.0})
    rest, found = split_open_overrides(["x", "--config.search.constraints.flops=45e6",
                                        "--config.search.constraints.energy=abc",
                                        "--config.search.max_candidates=3"])
    assert rest == ["x", "--config.search.max_candidates=3"]
    assert found == {"flops": 45e6, "energy": "abc"}


def test_the_command_line_sets_bounds_and_recommend_cost_or_says_why_not_in_one_line(tmp_path):
    base = ["search", f"--config={SEARCH_CONFIG}", f"--workdir={tmp_path / 'w'}"]
    results = run_cli_probe([
        [*base, "--config.search.constraints.flops=abc"],
        [*base, "--config.search.constraints.energy=3"],
        [*base, "--config.search.constraints.params=-2"],
        [*base, "--config.search.selection.recommend_cost=bogus"],
        # valid bound and cost: the first error is a later field's, so both were taken
        [*base, "--config.search.constraints.flops=45e6",
         "--config.search.selection.recommend_cost=params",
         "--config.search.fidelity.cost=bogus"],
    ])
    expected = ["search.constraints.flops: expected an upper bound, a finite number >= 0, "
                "got 'abc'",
                "search.constraints.energy: unknown cost 'energy'",
                "search.constraints.params: expected an upper bound",
                "search.selection: recommend_cost: unknown cost objective 'bogus'",
                "search.fidelity.cost"]
    for (code, err), want in zip(results, expected, strict=True):
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and want in lines[0], err
    assert not (tmp_path / "w").exists()


VAL = 100
# id: (accuracy, flops, params); a 5e6-FLOPs bound leaves out the seed (1) and candidate 2
ROWS = {1: (0.90, 8.0e6, 2.0e5), 2: (0.90, 6.0e6, 1.0e5), 3: (0.89, 4.0e6, 2.5e5),
        4: (0.88, 3.0e6, 3.0e5), 5: (0.50, 1.0e6, 1.0e4)}


def _study(workdir, bounds, recommend_cost="flops"):
    graph, constants, _ = cnn.CifarNet()
    graph_json = graph_to_json(graph, constants)
    study = Study.create(workdir, config={
        "train": {"input": {"image_size": 32}},
        "search": {"constraints": bounds, "selection": {"noninferiority_pt": 5.0,
                                                        "recommend_cost": recommend_cost}}})
    rng = np.random.default_rng(0)
    seed_bits = rng.random(VAL) < 0.9
    for cid, (acc, flops, params) in ROWS.items():
        study.add(graph_json, parent_id=None if cid == 1 else 1, fingerprint=f"{cid:08x}")
        bits = seed_bits if acc > 0.85 else rng.random(VAL) < acc
        study.tell(cid, {"accuracy": acc, "flops": flops, "params": params,
                         "val_examples": VAL, "val_correct": examples.to_text(bits)})
    return study


def test_a_bound_that_excludes_the_seed_recommends_a_feasible_child(tmp_path):
    study = _study(tmp_path / "s", {"flops": 5.0e6}, recommend_cost="params")
    done = study.candidates("done", with_graphs=False)
    rec = recommend.recommend_for(done, recommend.Comparisons.of(study), study.config)
    # 3 and 4 are within the bound and within noise of the seed; 3 has fewer params
    assert rec.candidate.id == 3 and rec.cost == "params"
    assert "3 of 5 done candidates are within flops <= 5e+06" in rec.reason
    # without the bound, candidate 2 (fewest params of those non-inferior) would be chosen
    free = recommend.recommend(done, recommend.Comparisons.of(study), 5.0, "params")
    assert free.candidate.id == 2
    text = summary(study)
    assert ("bounds (search.constraints): flops <= 5e+06 (met by 3, least 1e+06); 3 of 5 "
            "done candidates are within every bound") in text
    assert "recommended: candidate 3" in text
    assert study.feasible_count({"flops": 5.0e6}) == 3
    html = write_report(study, tmp_path / "report", k=3).read_text()
    assert "flops &lt;= 5e+06 (met by 3, least 1e+06); 3 of 5 done candidates are within" in html
    with open(tmp_path / "report" / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert {int(r["id"]): int(r["feasible"]) for r in rows} == {1: 0, 2: 0, 3: 1, 4: 1, 5: 1}
    seen = json.loads(json.dumps(overview(study)))
    assert seen["bounds"] == "flops <= 5e+06" and seen["feasible"] == 3


def test_a_bound_nothing_meets_is_one_line_with_the_closest(tmp_path):
    study = _study(tmp_path / "s", {"flops": 5.0e5, "params": 5.0e3})
    done = study.candidates("done", with_graphs=False)
    rec = recommend.recommend_for(done, recommend.Comparisons.of(study), study.config)
    assert rec.candidate is None and rec.closest.id == 5
    (line,) = recommend.recommendation_lines(rec, study.workdir)
    assert line == ("recommended: none: no done candidate is within search.constraints "
                    "(flops <= 5e+05, params <= 5000); the closest is candidate 5 (flops "
                    "1e+06, params 1e+04)")
    text = summary(study)
    assert "0 of 5 done candidates are within every bound (none met them)" in text
    assert text.splitlines()[-1] == line
    from nas.search.result import candidate_id

    with pytest.raises(ValueError, match="no done candidate is within search.constraints"):
        candidate_id(study, "recommended")


@pytest.mark.parametrize("overrides, match", [
    ({"search.constraints.flops": -1.0}, r"^search\.constraints\.flops: expected an upper "
     r"bound, a finite number >= 0, got -1"),
    ({"search.constraints.energy": 1.0}, r"^search\.constraints\.energy: unknown cost"),
    ({"search.selection.recommend_cost": "energy"},
     r"^search\.selection: recommend_cost: unknown cost objective 'energy'"),
])
def test_run_search_refuses_a_bad_bound_or_cost_in_one_line_before_any_workdir(
        tmp_path, overrides, match):
    import nas

    with pytest.raises(ValueError, match=match) as e:
        nas.run_search("cnn", "digits", workdir=tmp_path / "w", max_candidates=2,
                       overrides=overrides, progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "w").exists()
