"""Children that start where their parent was: each child's validation
accuracy before fine-tuning is recorded next to its parent's (study, CSV, page, summary),
and its fine-tuning takes at least `search.min_child_steps` optimizer steps."""

from __future__ import annotations

import csv
import io

import pytest

from nas.graph.serialize import graph_to_json
from nas.search.execution.driver import Driver
from nas.search.reporting.report import to_csv, write_report
from nas.search.reporting.report_text import summary
from nas.search.strategy.settings import candidate_train_config, read_settings, validate_search
from nas.train import TrainOptions, train_and_eval
from tests.train.helpers import tiny_config, tiny_graph


def test_min_steps_holds_on_a_small_data_set(tmp_path):
    """A tenth of an epoch of the digits is 2 steps at batch 64; min_steps makes it 7,
    and the schedule spans the 7."""
    graph, constants = tiny_graph()
    config = tiny_config(str(tmp_path / "data"), total_epochs=0.1, min_steps=7)
    metrics, _, _ = train_and_eval(config, eval_perf=False,
                                   options=TrainOptions(graph=graph, constants=constants))
    assert metrics.steps == 7
    config = tiny_config(str(tmp_path / "data"), total_epochs=0.1)
    metrics, _, _ = train_and_eval(config, eval_perf=False,
                                   options=TrainOptions(graph=graph, constants=constants))
    assert metrics.steps == 2 and metrics.start_acc == -1.0  # not asked for


def test_children_get_min_child_steps_and_the_seed_its_own(search_config):
    config = search_config(min_child_steps=30)
    search = read_settings(config)
    train = config.train.to_dict()
    assert candidate_train_config(train, search, is_seed=False)["min_steps"] == 30
    assert candidate_train_config(train, search, is_seed=True).get("min_steps", 0) == 0
    with pytest.raises(ValueError, match="search.min_child_steps"):
        validate_search(search_config(min_child_steps=-1))
    with pytest.raises(ValueError, match="min_steps"):
        train_and_eval(tiny_config("", min_steps=-3), eval_perf=False)


def test_a_childs_start_is_recorded_next_to_its_parents(tmp_path, search_config):
    path = tmp_path / "tiny.json"
    path.write_text(graph_to_json(*tiny_graph()))
    config = search_config(max_candidates=3, seed_epochs=0.1, seed_graph=str(path),
                           min_child_steps=6)
    config.train.total_epochs = 0.05  # 1 step by epochs; min_child_steps makes it 6
    study = Driver(config, str(tmp_path / "s")).run(progress=False)
    children = [c for c in study.candidates("done") if c.parent_id is not None]
    assert children
    for child in children:
        assert child.metrics["steps"] == 6
        assert 0.0 <= child.metrics["start_accuracy"] <= 1.0
    seed = study.get(1)
    assert "start_accuracy" not in seed.metrics  # the seed arrived without weights
    rows = list(csv.DictReader(io.StringIO(to_csv(study))))
    by_id = {int(r["id"]): r for r in rows}
    for child in children:
        row = by_id[child.id]
        assert float(row["start_accuracy"]) == pytest.approx(child.metrics["start_accuracy"])
        assert float(row["parent_accuracy"]) == pytest.approx(study.get(child.parent_id).accuracy)
    assert by_id[1]["start_accuracy"] == "" and by_id[1]["parent_accuracy"] == ""
    text = summary(study)
    assert "before fine-tuning, " in text and f"of {len(children)} after" in text
    page = write_report(study).read_text()
    assert "started at " in page


def test_a_child_that_cannot_fit_its_parent_is_refused_before_it_trains(tmp_path,
                                                                         search_config):
    """search.fit.max_error: a fit error above it refuses the child with one line; with
    search.max_refusals=0 the refused child fails as a candidate."""
    config = search_config(max_candidates=3, seed_epochs=0.1, max_refusals=0,
                           fit={"steps": 2, "batches": 1, "batch_size": 8,
                                "bn_batch_size": 16, "max_error": 1e-9})
    config.train.total_epochs = 0.1
    study = Driver(config, str(tmp_path / "s")).run(progress=False)
    fitted = [c for c in study.candidates() if (c.inheritance or {}).get("fit_pairs")]
    assert fitted
    for child in fitted:
        assert child.status == "failed" and "search.fit.max_error=1e-09" in child.error
        assert "cannot start near its parent" in child.error
        assert "(search.max_refusals=0)" in child.error
    with pytest.raises(ValueError, match="search.fit.max_error"):
        validate_search(search_config(fit={"max_error": -1.0}))
