"""A child's starting weights are complete before it can be claimed; leftovers of saves
interrupted by a kill are removed when the driver resumes (but never under a live claim)."""

import json
import os

import numpy as np
import pytest

from nas.search.execution.driver import init_path, remove_partial_saves
from nas.search.execution.task import make_task
from nas.search.store.study import Study
from nas.search.strategy.settings import SearchSettings
from nas.train.checkpoint import save_variables
from tests.search.conftest import tiny_search_config


def test_leftovers_removed_except_under_live_claims(tmp_path):
    study = Study.create(tmp_path)
    idle, held = study.add(json.dumps({"g": 1})), study.add(json.dumps({"g": 2}))
    study.claim("someone", held)
    leftovers = [tmp_path / "inits" / "4.orbax-checkpoint-tmp-17",
                 tmp_path / "candidates" / str(idle) / "final.orbax-checkpoint-tmp-3"]
    live = tmp_path / "candidates" / str(held) / "final.orbax-checkpoint-tmp-9"
    for folder in [*leftovers, live]:
        folder.mkdir(parents=True)
        (folder / "part").write_text("half")
    removed = remove_partial_saves(study)
    assert sorted(removed) == sorted(str(p) for p in leftovers)
    assert live.is_dir() and not any(p.exists() for p in leftovers)


def test_child_trains_from_the_weights_saved_before_it_was_added(tmp_path):
    config = tiny_search_config()
    study = Study.create(tmp_path, config.to_dict())
    seed = study.add(json.dumps({"g": 0}))
    weights = {"params": {"d": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3)}}}
    path = save_variables(init_path(tmp_path, 0), weights)
    child = study.add(json.dumps({"g": 1}), parent_id=seed,
                      inheritance={"inherited": [], "new": ["d"], "init_path": path})
    task = make_task(study, config.train, SearchSettings.from_stored(config), child)
    np.testing.assert_array_equal(task.init_variables["params"]["d"]["kernel"],
                                  weights["params"]["d"]["kernel"])
    assert not os.path.exists(os.path.join(tmp_path, "candidates", str(child), "init"))


def test_a_childs_task_bounds_its_start_by_its_parents_accuracy(tmp_path):
    """search.max_start_drop: a child's worker refuses a start more than that
    below its parent's validation accuracy; the seed and an unset drop have no bound."""
    config = tiny_search_config()
    study = Study.create(tmp_path, config.to_dict())
    seed = study.add(json.dumps({"g": 0}))
    study.tell(seed, {"accuracy": 0.9})
    path = save_variables(init_path(tmp_path, 0), {"params": {}})
    child = study.add(json.dumps({"g": 1}), parent_id=seed,
                      inheritance={"inherited": [], "new": [], "init_path": path})
    config.search.max_start_drop = 0.3
    search = SearchSettings.from_stored(config)
    assert make_task(study, config.train, search, child).min_start_accuracy == \
        pytest.approx(0.6)
    assert make_task(study, config.train, search, seed).min_start_accuracy is None
    config.search.max_start_drop = 0.0
    search = SearchSettings.from_stored(config)
    assert make_task(study, config.train, search, child).min_start_accuracy is None
