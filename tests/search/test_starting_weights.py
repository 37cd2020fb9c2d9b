"""A child's starting weights are complete before it can be claimed; leftovers of saves
interrupted by a kill are removed when the driver resumes (but never under a live claim).
The driver that saved them hands them to the child's task from memory; any other process
(a resumed driver, an external worker) reads the files."""

import json
import os

import numpy as np
import pytest

from nas.search.execution.driver import init_path, remove_partial_saves
from nas.search.execution.task import StartingWeights, make_task
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


def _pending_child(tmp_path, starts):
    config = tiny_search_config()
    study = Study.create(tmp_path, config.to_dict())
    seed = study.add(json.dumps({"g": 0}))
    weights = {"params": {"d": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3)}}}
    path = starts.save(init_path(tmp_path, 0), weights)
    child = study.add(json.dumps({"g": 1}), parent_id=seed,
                      inheritance={"inherited": [], "new": ["d"], "init_path": path})
    return config, study, child, weights, path


def test_the_process_that_saved_a_childs_weights_hands_them_over_without_reading_them(
        tmp_path):
    starts = StartingWeights(keep=4)
    config, study, child, weights, path = _pending_child(tmp_path, starts)
    weights["params"]["d"]["kernel"][:] = -1.0  # the caller's arrays: not what was kept
    for root, _, files in os.walk(path):  # the files no longer hold what was saved
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"\x00 damaged")
    search = SearchSettings.from_stored(config)
    task = make_task(study, config.train, search, child, starts=starts)
    kernel = task.init_variables["params"]["d"]["kernel"]
    np.testing.assert_array_equal(kernel, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert kernel.flags.writeable  # as a read from disk gives
    # taken once: a second task of the child (another process, a resume) reads the files
    with pytest.raises(ValueError, match="saved variables at .* cannot be read"):
        make_task(study, config.train, search, child, starts=starts)


def test_the_weights_kept_in_memory_are_bounded_and_the_oldest_go_first(tmp_path):
    starts = StartingWeights(keep=2)
    paths = [starts.save(str(tmp_path / str(k)), {"params": {"w": np.full(2, float(k))}})
             for k in range(3)]
    assert starts.take(paths[0]) is None  # dropped: its task reads the file
    for k in (1, 2):
        np.testing.assert_array_equal(starts.take(paths[k])["params"]["w"], np.full(2, k))
        assert starts.take(paths[k]) is None
