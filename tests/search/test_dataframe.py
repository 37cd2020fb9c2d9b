"""`SearchResult.dataframe()`: one row per candidate, every metric and cost, parent, status."""

from __future__ import annotations

import numpy as np

import nas
from nas.io import examples
from nas.search import Study

GRAPH = '{"placeholder": true}'


def test_one_row_per_candidate_with_every_metric_cost_parent_and_status(tmp_path):
    study = Study.create(tmp_path / "s", {"search": {}})
    right = np.arange(10) % 2 == 0
    for parent, acc, kilo in ((None, 0.5, 3.0), (1, 0.6, 2.5)):
        cid = study.add(GRAPH, parent_id=parent)
        study.claim("w", cid)
        study.tell(cid, {"accuracy": acc, "loss": 1.0 - acc, "flops": 100.0, "params": 50.0,
                         "kilo_params": kilo, "val_examples": 10,
                         "val_correct": examples.to_text(right)}, worker="w")
    failed = study.add(GRAPH, parent_id=2)
    study.claim("w", failed)
    study.fail(failed, "FloatingPointError: training diverged", worker="w")
    study.add(GRAPH, parent_id=2)  # pending
    frame = nas.SearchResult(study).dataframe()
    assert list(frame.index) == [1, 2, 3, 4]
    assert list(frame["status"]) == ["done", "done", "failed", "pending"]
    assert frame.loc[2, "parent"] == 1 and np.isnan(frame.loc[1, "parent"])
    assert frame.loc[2, "accuracy"] == 0.6 and frame.loc[1, "kilo_params"] == 3.0
    assert frame.loc[2, "flops"] == 100.0 and frame.loc[2, "loss"] == 0.4
    assert frame.loc[3, "error"] == "FloatingPointError: training diverged"
    assert "val_correct" not in frame.columns  # per-example bits stay in the study
    assert frame.loc[1, "kind"] == "seed"


def test_the_move_and_each_hyperparameter_are_columns(tmp_path):
    study = Study.create(tmp_path / "s", {"search": {}})
    seed = study.add(GRAPH)
    child = study.add(GRAPH, parent_id=seed,
                      inheritance={"kind": "shrink", "hparams": {"lr": 0.002, "wd": 1e-4}})
    for cid, start in ((seed, None), (child, 0.7)):
        study.claim("w", cid)
        study.tell(cid, {"accuracy": 0.8, "flops": 10.0, **(
            {"start_accuracy": start} if start is not None else {})}, worker="w")
    frame = nas.SearchResult(study).dataframe()
    assert list(frame["kind"]) == ["seed", "shrink"]
    assert frame.loc[child, "hparams_lr"] == 0.002 and frame.loc[child, "hparams_wd"] == 1e-4
    assert frame.loc[child, "start_accuracy"] == 0.7 and frame.loc[child, "parent"] == seed
