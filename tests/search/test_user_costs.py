"""A user's own cost (`search.costs`, lower is better) is a front, a selection objective
and the recommendation's cost wherever the built-in costs are: built through the Study
API with candidates whose metrics hold "latency_ms" (no training)."""

import csv
import json
import re
import runpy

import ml_collections
import numpy as np
import pytest

from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.reporting.dashboard import overview
from nas.search.reporting.highlights import front_of
from nas.search.reporting.report import pareto_figure, progress_series, write_report
from nas.search.reporting.report_text import summary
from nas.search.strategy import recommend
from nas.search.strategy.population import DoneCache
from nas.search.strategy.selection import (
    Individual,
    SelectionConfig,
    Selector,
    check_cost,
    check_user_costs,
    select_parents,
)
from nas.search.strategy.settings import validate_search
from nas.zoo import cnn
from tests.search.conftest import SEARCH_CONFIG

VAL = 200
# id: (accuracy, flops, latency_ms). By FLOPs the front is 1, 3, 4; by latency 1, 2, 5.
ROWS = {1: (0.90, 4.0e6, 9.0), 2: (0.88, 5.0e6, 2.0), 3: (0.86, 1.0e6, 7.0),
        4: (0.89, 3.0e6, 9.5), 5: (0.70, 6.0e6, 1.0)}
CONFIG = {"train": {"input": {"image_size": 32}},
          "search": {"costs": {"latency_ms": "tests.search.test_user_costs:latency"},
                     "selection": {"costs": ["flops", "latency_ms"],
                                   "recommend_cost": "latency_ms",
                                   "noninferiority_pt": 5.0}}}


def _study(workdir, rows=ROWS, config=CONFIG, same_examples=True):
    """Done candidates with the given accuracies and costs; per-example validation results
    alike (`same_examples`: each within noise of the seed) or drawn at the accuracy."""
    graph, constants, _ = cnn.CifarNet()
    graph_json = graph_to_json(graph, constants)
    study = Study.create(workdir, config=config)
    rng = np.random.default_rng(0)
    seed_bits = rng.random(VAL) < 0.9
    for cid, (acc, flops, latency) in rows.items():
        study.add(graph_json, parent_id=None if cid == 1 else 1, fingerprint=f"{cid:08x}")
        bits = seed_bits if same_examples else rng.random(VAL) < acc
        study.tell(cid, {"accuracy": acc, "flops": flops, "params": flops / 10,
                         "val_examples": VAL, "val_correct": examples.to_text(bits),
                         "latency_ms": latency})
    return study


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return _study(tmp_path_factory.mktemp("costs"))


def test_the_study_reads_its_own_costs_by_name(study, tmp_path):
    assert study.user_costs == ("latency_ms",)
    assert study.get(2).extra_metrics["latency_ms"] == 2.0
    rows = Study.load(study.workdir).done_rows(0)
    assert [r.extra_metrics["latency_ms"] for r in rows] == [v[2] for v in ROWS.values()]
    # a study whose config names no costs reads none of its metrics as one
    plain = _study(tmp_path / "plain", {1: ROWS[1]}, config={"search": {}})
    assert plain.user_costs == () and plain.done_rows(0)[0].user_costs == {}
    # latency_ms is a built-in cost, read from the metrics where they hold
    # it; a name the study does not know is still refused
    assert [c.id for c in plain.pareto_front("latency_ms")] == [1]  # its metrics hold it
    with pytest.raises(ValueError, match="unknown cost objective 'energy'"):
        plain.pareto_front("energy")


def test_pareto_front_and_front_of_rank_by_the_users_cost(study):
    assert [c.id for c in study.pareto_front("latency_ms")] == [1, 2, 5]
    assert [c.id for c in study.pareto_front("flops")] == [1, 4, 3]
    done = study.candidates("done", with_graphs=False)
    assert [c.id for c in front_of(done, "latency_ms")] == [5, 2, 1]  # by cost
    cache = DoneCache(study)
    cache.refresh()
    assert cache.front_size("latency_ms") == 3
    assert cache.front_size("flops") == 3
    assert sorted(cache.front_points("flops")) == sorted(
        (c.accuracy, c.flops) for c in study.pareto_front("flops"))
    with pytest.raises(ValueError, match="unknown cost objective 'energy'.*latency_ms"):
        study.pareto_front("energy")
    with pytest.raises(ValueError, match="cost: unknown cost objective 'energy'"):
        cache.front_size("energy")


def test_the_driver_population_carries_the_cost_as_a_column(study):
    pop = DoneCache(study).population(5)
    assert pop.columns.costs["latency_ms"].tolist() == [v[2] for v in ROWS.values()]


def _config(cost, **knobs):
    return SelectionConfig(costs=(cost,), user_costs=("latency_ms",), **knobs)


def test_selection_by_the_users_cost_picks_its_front(study):
    """Top-3 draws by distance to the front: by latency its front (1, 2, 5), by FLOPs
    its own (1, 3, 4)."""
    pop = DoneCache(study).population(5)
    knobs = {"p_accuracy_only": 0.0, "top_n": 3, "min_to_select": 3, "balanced": False,
             "noise_ties": False}
    by_latency = {Selector(_config("latency_ms", **knobs)).select(
        pop.columns, np.random.default_rng(s))[0] for s in range(40)}
    by_flops = {Selector(_config("flops", **knobs)).select(
        pop.columns, np.random.default_rng(s))[0] for s in range(40)}
    assert by_latency == {1, 2, 5}
    assert by_flops == {1, 3, 4}


def test_a_users_cost_draws_as_the_built_in_cost_with_the_same_values(tmp_path):
    """latency_ms = params on 80 candidates: every draw, kept (`Selector`: closest-k index,
    paired noise ties) or afresh (`select_parents` on candidates: Wilson ties), gives the
    same parents as ranking by params."""
    rng = np.random.default_rng(3)
    rows = {i: (float(np.clip(rng.normal(0.8, 0.08), 0.2, 0.99)),
                float(rng.lognormal(15.0, 0.6)), 0.0) for i in range(1, 81)}
    rows = {i: (a, f, f / 10) for i, (a, f, _) in rows.items()}  # latency = params
    study = _study(tmp_path / "s", rows, same_examples=False)
    pop = DoneCache(study).population(80)
    done = study.candidates("done", with_graphs=False)
    kept_params, kept_latency = Selector(_config("params")), Selector(_config("latency_ms"))
    for s in range(30):
        want = kept_params.select(pop.columns, np.random.default_rng(s), num=2)
        assert kept_latency.select(pop.columns, np.random.default_rng(s), num=2) == want
        fresh = [select_parents([Individual.from_candidate(c) for c in done],
                                _config(cost), np.random.default_rng(s), num=2)
                 for cost in ("params", "latency_ms")]
        assert fresh[1] == fresh[0]
    by_name = [Individual.from_candidate(c, ("latency_ms",)) for c in done]
    assert select_parents(by_name, _config("latency_ms"), np.random.default_rng(7)) == \
        select_parents(by_name, _config("params"), np.random.default_rng(7))


def test_the_recommendation_minimizes_the_configured_cost(study):
    """Every child is within noise of the seed (the same examples right), so the cheapest
    wins: by latency candidate 5, by FLOPs candidate 3."""
    done = study.candidates("done", with_graphs=False)
    pairs = recommend.Comparisons.of(study)
    assert recommend.recommend_cost(study.config) == "latency_ms"
    margin = recommend.margin_pt(study.config)
    rec = recommend.recommend(done, pairs, margin, recommend.recommend_cost(study.config))
    assert rec.candidate.id == 5 and rec.cost == "latency_ms"
    assert rec.cost_ratio == pytest.approx(1.0 / 9.0)
    assert recommend.recommend(done, pairs, margin).candidate.id == 3  # FLOPs by default
    line = recommend.recommendation_lines(rec, study.workdir)[0]
    assert "recommended: candidate 5, 0.111 of the seed's latency_ms" in line


def test_report_csv_summary_and_plots_show_the_cost(study, tmp_path):
    html = write_report(study, tmp_path / "report", k=3).read_text()
    assert 'data-cost="latency_ms"' in html and "accuracy vs latency_ms" in html
    assert "latency_ms 2" in html  # candidate 2's section lists its cost
    table = html[html.index('id="candidates-table"'):]
    head = re.findall(r"<th>([^<]*)</th>", table[:table.index("</thead>")])
    row = re.findall(r"<td[^>]*>(.*?)</td>", table[table.index('<td id="c5"'):])
    assert row[head.index("latency_ms")] == "1" and head.index("latency_ms") == 13
    with open(tmp_path / "report" / "report.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [float(r["latency_ms"]) for r in table] == [v[2] for v in ROWS.values()]
    assert [r["recommended"] for r in table] == ["0", "0", "0", "0", "1"]
    assert {int(r["id"]) for r in table if r["on_front"] == "1"} == {1, 2, 3, 4, 5}
    fig = pareto_figure(study)
    assert [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()] == \
        ["FLOPs", "parameters", "latency_ms"]
    text = summary(study, k=3)
    assert "latency_ms" in text.splitlines()[2]  # the table's header
    assert "recommended: candidate 5, 0.111 of the seed's latency_ms" in text


def test_progress_and_dashboard_fronts_read_the_cost(study):
    done = study.candidates("done", with_graphs=False)
    assert progress_series(done, "latency_ms", study.user_costs)[-1][2] == 3
    with pytest.raises(ValueError, match="cost: unknown cost objective 'energy'"):
        progress_series(done, "energy")  # not a cost unless the search names it
    fronts = {f["cost"]: f for f in json.loads(json.dumps(overview(study)))["fronts"]}
    assert [r["id"] for r in fronts["latency_ms"]["rows"]] == [1, 2, 5]
    assert [r["cost_value"] for r in fronts["latency_ms"]["rows"]] == ["9", "2", "1"]
    assert fronts["latency_ms"]["extra"] == [["cost_value", "latency_ms"]]
    assert fronts["flops"]["extra"] == []


def _search_config(costs, selection):
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.search.costs = costs
    config.search.finals = {"k": 0}  # the finals have tests of their own
    config.search.selection = ml_collections.ConfigDict(
        {**config.search.selection.to_dict(), **selection})
    return config


def test_a_search_config_may_rank_by_its_own_cost():
    search = validate_search(_search_config(
        {"latency_ms": "tests.search.test_user_costs:latency"},
        {"costs": ("latency_ms", "flops"), "recommend_cost": "latency_ms"}))
    assert list(search.costs) == ["latency_ms"]


@pytest.mark.parametrize("costs, selection, match", [
    ({}, {"costs": ("energy",)}, r"^search\.selection: costs: unknown cost objective "
     r"'energy'; expected one of the built-in costs \('flops', 'params', "
     r"'im_sec_core_train', 'im_sec_core_infer', 'latency_ms'\) \(or a user's cost named "
     r"in search"),
    ({"latency_ms": "m:f"}, {"costs": ("energy",)}, r"^search\.selection: costs: unknown "
     r"cost objective 'energy'; .* or the user's costs \('latency_ms',\)"),
    ({"latency_ms": "m:f"}, {"recommend_cost": "energy"},
     r"^search\.selection: recommend_cost: unknown cost objective 'energy'"),
    ({"loss": "m:f"}, {}, r"^search\.costs: the cost name 'loss' is a built-in metric's"),
    ({"flops": "m:f"}, {}, r"^search\.costs: the cost name 'flops' is a built-in"),
    ({"test_accuracy": "m:f"}, {}, r"^search\.costs: the cost name 'test_accuracy'"),
    ({"my cost": "m:f"}, {}, r"^search\.costs: a cost's name must be an identifier"),
    ({"user_costs": "m:f"}, {"user_costs": ("x",)},
     r"^config field 'search\.selection\.user_costs' is unknown; expected one of "),
])
def test_bad_cost_names_are_one_line(costs, selection, match):
    with pytest.raises(ValueError, match=match) as e:
        validate_search(_search_config(costs, selection))
    assert "\n" not in str(e.value)


def test_no_metric_a_worker_reports_can_be_shadowed():
    """Every name the worker writes into a candidate's metrics is refused as a cost's."""
    from nas.train import Metrics

    reported = Metrics(test_examples=1, eval_correct="x", test_correct="x").record()
    for name in [*reported, "epochs", "fit_seconds", "fit_conv1"]:
        with pytest.raises(ValueError, match="built-in metric"):
            check_user_costs([name])
    assert check_user_costs(["latency_ms", "energy_mj"]) == ("latency_ms", "energy_mj")
    assert check_cost("latency_ms", user_costs=("latency_ms",)) == "latency_ms"
    with pytest.raises(ValueError, match="user_costs: the cost name 'params'"):
        SelectionConfig(user_costs=("params",))
