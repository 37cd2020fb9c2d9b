"""The dashboard's views in-process: a candidate's page compares paired with the seed as
the summary does, and the overview draws the fronts the search ranks by."""

import numpy as np
import pytest

from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.reporting.dashboard import Dashboard
from nas.search.reporting.report_text import summary
from nas.search.strategy import recommend
from nas.zoo import cnn

N = 143


def _bits(wrong):
    correct = np.ones(N, dtype=bool)
    correct[list(wrong)] = False
    return {"val_examples": N, "val_correct": examples.to_text(correct)}


def _study(workdir, paired=True):
    """A CifarNet seed and two children; with `paired`, per-example validation results."""
    graph, constants, _ = cnn.CifarNet()
    g = graph_to_json(graph, constants)
    study = Study.create(workdir, config={"train": {"input": {"image_size": 32}},
                                          "search": {"selection": {"costs": ["flops"]}}})
    rows = [(None, 7.5e7, range(10)), (1, 4.0e7, range(4)), (2, 3.0e7, range(40))]
    for parent, flops, wrong in rows:
        cid = study.add(g, parent_id=parent, generation=0 if parent is None else 1)
        study.claim("w", cid)
        result = {"accuracy": 1 - len(wrong) / N, "flops": flops, "params": flops / 30,
                  "val_examples": N}
        study.tell(cid, {**result, **(_bits(wrong) if paired else {})})
    return study


def test_a_candidate_page_compares_paired_as_the_summary_does(tmp_path):
    study = _study(tmp_path)
    page = Dashboard(study).candidate_html(3)
    seed, kid, grandkid = (study.get(i) for i in (1, 2, 3))
    pairs = recommend.Comparisons.of(study)
    want_seed = recommend.versus(grandkid, seed, pairs, "validation")
    want_parent = recommend.versus(grandkid, kid, pairs, "validation")
    assert "paired" in want_seed and "paired" in want_parent
    assert f"validation accuracy {want_seed}" in page
    assert f"validation accuracy {want_parent}" in page
    assert "Wilson" not in page.split('class="vs-seed"')[1].split("</p>")[0]
    assert want_seed in summary(study)  # the summary's "val vs seed" cell says the same


def test_without_per_example_results_the_page_says_wilson(tmp_path):
    page = Dashboard(_study(tmp_path, paired=False)).candidate_html(3)
    vs_seed = page.split('class="vs-seed"')[1].split("</p>")[0]
    assert "(Wilson)" in vs_seed and "paired" not in vs_seed


def test_a_missing_candidate_is_one_value_error(tmp_path):
    with pytest.raises(ValueError, match="^candidate_id: no candidate 9 "):
        Dashboard(_study(tmp_path)).candidate_html(9)


def _finish(study, cid, accuracy, flops, wrong=()):
    study.claim("w", cid)
    study.tell(cid, {"accuracy": accuracy, "flops": flops, "params": flops / 30,
                     "val_examples": N, **_bits(wrong)})


def _svg(pictures, cost="flops"):
    return next(p["svg"] for p in pictures["plots"] if p["cost"] == cost)


def test_the_pictures_mark_the_summarys_recommendation_and_the_seed(tmp_path):
    from nas.search.reporting.highlights import Highlights

    study = _study(tmp_path)
    pictures = Dashboard(study).live.pictures()
    marks = Highlights.of(study, study.candidates(with_graphs=False), 10)
    assert pictures["recommended"] == marks.recommendation.candidate.id == 2
    assert pictures["seed"] == 1 and pictures["done"] == 3 and not pictures["large"]
    assert [p["cost"] for p in pictures["plots"]] == ["flops"]  # search.selection.costs
    svg = _svg(pictures)
    for cid in (1, 2, 3):
        assert f'data-id="{cid}"' in svg and f'href="/candidates/{cid}"' in svg
    assert 'data-mark="seed"' in svg and 'class="mark recommended" data-id="2"' in svg
    assert "seed 1" in svg and "recommended 2" in svg


def test_the_pictures_are_redrawn_when_a_candidate_finishes_in_any_order(tmp_path):
    from nas.search.reporting.highlights import Highlights

    study = _study(tmp_path)
    graph = study.get(1).graph_json
    live = Dashboard(study).live
    first = live.pictures()
    assert live.pictures() is first  # nothing finished: not drawn again
    late, early = study.add(graph, parent_id=2), study.add(graph, parent_id=2)
    assert live.pictures() is first  # pending ones change no picture
    _finish(study, early, 0.99, 2.0e7, wrong=[0])  # finishes before the older one
    second = live.pictures()
    assert second is not first and second["done"] == 4
    assert f'data-id="{early}"' in _svg(second) and f'data-id="{late}"' not in _svg(second)
    assert second["recommended"] == early  # cheaper and more accurate than the seed
    _finish(study, late, 0.5, 1.0e7, wrong=range(70))
    third = live.pictures()
    assert third["done"] == 5 and f'data-id="{late}"' in _svg(third)
    fresh = Highlights.of(study, study.candidates(with_graphs=False), 10)
    assert third["recommended"] == fresh.recommendation.candidate.id


def test_past_the_scale_limit_the_population_is_density(tmp_path, monkeypatch):
    from nas.search.reporting import dashboard

    monkeypatch.setattr(dashboard, "SCALE_LIMIT", 2)
    study = _study(tmp_path)
    worse = study.add(study.get(1).graph_json, parent_id=1)
    _finish(study, worse, 0.5, 9.0e7, wrong=range(70))  # on no front, not the best
    pictures = dashboard.LiveFronts(study, k=1).pictures()
    svg = _svg(pictures)
    assert pictures["large"] and '<g class="density" data-n="4"' in svg
    # points: the front (2, 3), the best (2), the seed (1) and the recommended (2)
    assert [svg.count(f'class="point" data-id="{i}"') for i in (1, 2, 3, worse)] == [
        1, 1, 1, 0]
    assert 'data-mark="seed"' in svg and 'class="mark recommended" data-id="2"' in svg


def test_an_empty_study_draws_empty_plots(tmp_path):
    study = Study.create(tmp_path, config={"search": {"selection": {"costs": ["flops",
                                                                              "params"]}}})
    pictures = Dashboard(study).live.pictures()
    assert [p["cost"] for p in pictures["plots"]] == ["flops", "params"]
    assert pictures["seed"] is None and pictures["recommended"] is None
    assert "no finished candidates yet" in _svg(pictures, "params")


def test_the_ringed_points_are_the_studys_fronts_ties_included(tmp_path):
    import json
    import re

    study = Study.create(tmp_path, config={"search": {"selection": {
        "costs": ["flops", "im_sec_core_train"]}}})
    rng = np.random.default_rng(7)
    for i in range(40):
        cid = study.add(json.dumps({"i": i}), parent_id=None if i == 0 else 1)
        study.claim("w", cid)
        acc = float(rng.choice([0.5, 0.6, 0.7, 0.8, 0.9]))  # ties in accuracy and cost
        flops = float(rng.choice([1e6, 2e6, 4e6, 8e6]))
        study.tell(cid, {"accuracy": acc, "flops": flops, "params": 1e4,
                         "im_sec_core_train": 1e9 / flops, "val_examples": N})
    pictures = Dashboard(study).live.pictures()
    for cost in ("flops", "im_sec_core_train"):
        ringed = re.findall(r'class="point" data-id="(\d+)"[^>]*stroke="#d62728"',
                            _svg(pictures, cost))
        assert sorted(map(int, ringed)) == sorted(c.id for c in study.pareto_front(cost))
        assert len(ringed) >= 2


def test_results_unpacked_together_equal_one_by_one():
    from types import SimpleNamespace

    from nas.search.reporting.dashboard import _unpacked

    rng = np.random.default_rng(5)
    rows, want = [], {}
    for i, n in enumerate([143, 143, 9, 143, 9, 0, 1]):
        bits = rng.random(n) < 0.7
        packed = examples.pack(bits)
        rows.append(SimpleNamespace(id=i, val_count=n, val_bits=packed))
        if n:
            want[i] = bits
    rows.append(SimpleNamespace(id=99, val_count=None, val_bits=None))  # no results
    got = _unpacked(rows)
    assert sorted(got) == sorted(want)
    for i, bits in want.items():
        np.testing.assert_array_equal(got[i], bits)
        assert got[i].dtype == bool and got[i].shape == bits.shape
    damaged = [SimpleNamespace(id=1, val_count=143, val_bits=b"\x00" * 3)]
    with pytest.raises(ValueError, match="^correctness: 3 bytes cannot hold exactly 143"):
        _unpacked(damaged)


def test_the_pictures_draw_a_users_cost_as_the_summary_ranks_it(tmp_path):
    """`search.costs`' latency_ms is a ranked front and the recommendation's cost: its
    picture rings the study's front by it and stars the summary's recommendation."""
    import re

    from tests.search.test_user_costs import _study as costs_study

    study = costs_study(tmp_path)
    pictures = Dashboard(study).live.pictures()
    assert [p["cost"] for p in pictures["plots"]] == ["flops", "latency_ms"]
    latency = _svg(pictures, "latency_ms")
    ringed = re.findall(r'class="point" data-id="(\d+)"[^>]*stroke="#d62728"', latency)
    assert sorted(map(int, ringed)) == sorted(c.id for c in study.pareto_front("latency_ms"))
    assert pictures["recommended"] == 5 and "recommended: candidate 5," in summary(study)
    assert "latency_ms" in latency and 'class="mark recommended" data-id="5"' in latency
