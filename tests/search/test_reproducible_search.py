"""A search's choices depend on its config and the validation results only: not on worker
timing (`search.pipeline_depth`) and not on the test split."""

import dataclasses
import os

import pytest

from nas.search.execution.driver import Driver


def test_a_proposal_reads_only_results_pipeline_depth_back(search_config, tmp_path):
    driver = Driver(search_config(pipeline_depth=2), str(tmp_path / "s"))
    driver.seed_population()
    study = driver.study
    assert driver.population() is None  # the seed has not finished
    seed = study.claim(worker="w")
    study.tell(seed.id, {"accuracy": 0.9, "flops": 10.0}, worker="w")
    assert [c.id for c in driver.population()] == [1]
    study.add(seed.graph_json, parent_id=1, generation=1, fingerprint="x")
    study.claim(worker="w")  # candidate 2 is training: proposal 3 does not wait for it
    assert [c.id for c in driver.population()] == [1]
    driver.search = dataclasses.replace(driver.search, pipeline_depth=1)  # ... unless it
    # must read it
    assert driver.population() is None
    study.tell(2, {"accuracy": 0.8, "flops": 5.0}, worker="w")
    assert [c.id for c in driver.population()] == [1, 2]


def _choices(study):
    return [(c.id, c.parent_id, c.fingerprint, c.accuracy) for c in study.candidates()]


@pytest.mark.slow
def test_same_config_same_choices_and_the_test_split_plays_no_part(search_config, tmp_path):
    """Two runs of a 4-candidate search give identical candidates, parents and validation
    accuracies, the second writing TensorBoard runs (which the search never reads); a third
    whose test split is different data (half of it) chooses the same."""
    runs = []
    for name, test_split, board in (("a", "test", False), ("b", "test", True),
                                    ("c", "test[:50%]", False)):
        config = search_config(max_candidates=4, tensorboard=board)
        config.train.eval.data.split = test_split
        runs.append(Driver(config, str(tmp_path / name)).run(progress=False))
    a, b, c = (_choices(study) for study in runs)
    assert len(a) == 4 and all(cand.status == "done" for cand in runs[0].candidates())
    assert a == b
    assert os.path.isdir(os.path.join(str(tmp_path / "b"), "tensorboard", "study"))
    assert a == c
    tests = [[cand.extra_metrics["test_examples"] for cand in study.candidates()] for study in runs]
    assert tests[0] == [360] * 4 and tests[2] == [180] * 4  # the test split was read ...
    assert {cand.extra_metrics["val_examples"] for cand in runs[2].candidates()} == {143}


@pytest.mark.slow
def test_the_pipeline_and_the_workers_change_when_not_what(search_config, tmp_path):
    """With the pipeline on (the driver proposes the next child and a second process on the
    worker's device sets it up, fits and compiles it while the current one trains), and with
    two workers, the candidates, parents and validation accuracies are those of the same
    search run serially in this process."""
    runs = {"serial": dict(executor="inline", propose_ahead=0, prepare_ahead=0),
            "pipelined": dict(executor="local", propose_ahead=1, prepare_ahead=1),
            "two workers": dict(executor="local", workers=2)}
    studies = {name: Driver(search_config(max_candidates=4, pipeline_depth=2, **settings),
                             str(tmp_path / name.replace(" ", "_"))).run(progress=False)
               for name, settings in runs.items()}
    serial = _choices(studies["serial"])
    assert len(serial) == 4 and all(c.status == "done" for c in studies["serial"].candidates())
    assert _choices(studies["pipelined"]) == serial
    assert _choices(studies["two workers"]) == serial
    piped = {c.id: c for c in studies["pipelined"].candidates()}
    # Candidate 3 (reading results up to candidate 1) was claimed and prepared while 2
    # trained, and took the device only once 2 was done with it.
    assert piped[3].started_at < piped[2].finished_at
    assert piped[3].metrics["device_started_at"] >= piped[2].metrics["device_finished_at"]
