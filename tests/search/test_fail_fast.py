"""Failures are caught fast: an out-of-memory candidate fails at once with the size it
asked for, and the soft time limit stops a training within a few steps of expiring."""

import json
import os
import stat

import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.serialize import graph_to_json
from nas.search.execution.executors import InlineExecutor
from nas.search.execution.task import Task
from nas.search.execution.worker import describe_failure
from tests.search.conftest import tiny_search_config


def _train_config(**changes):
    config = tiny_search_config().train
    config.update(changes)
    return config.to_dict()


def _huge_dense_graph():
    ops = [new_op("flat", OpType.FLATTEN, ["input"]),
           new_op("huge", OpType.DENSE, ["flat"], op_kwargs={"features": 2**36}),
           new_op("out", OpType.DENSE, ["huge"], op_kwargs={"features": 10})]
    return graph_to_json(new_graph(["input"], ["out"], ops), {})


def test_out_of_memory_candidate_fails_with_the_size_asked(tmp_path):
    executor = InlineExecutor()
    executor.submit(Task(7, _train_config(), _huge_dense_graph(), time_limit_s=600.0,
                         workdir=str(tmp_path / "oom")))
    (outcome,) = executor.poll(0)
    assert outcome.candidate_id == 7 and outcome.infeasible, outcome.error
    assert outcome.error.startswith("out of memory (asked ") and "bytes" in outcome.error


def test_describe_failure_classifies_memory_errors():
    assert describe_failure(MemoryError()) == ("out of memory (size not reported)", True)
    message, infeasible = describe_failure(RuntimeError(
        "RESOURCE_EXHAUSTED: Out of memory allocating 1099511627776 bytes."))
    assert infeasible and message == "out of memory (asked 1,099,511,627,776 bytes)"
    assert describe_failure(ValueError("bad\nsecond line")) == ("ValueError: bad", False)


@pytest.mark.slow  # data, init and compile before the first step: 20-35 s on 2 busy cores
def test_soft_time_limit_stops_a_one_epoch_child_within_steps(tmp_path):
    from nas.zoo import cnn

    graph, constants, _ = cnn.CifarNet()
    executor = InlineExecutor()
    executor.submit(Task(3, _train_config(total_epochs=1.0), graph_to_json(graph, constants),
                         time_limit_s=1e-3, workdir=str(tmp_path / "soft")))
    (outcome,) = executor.poll(0)
    assert outcome.error is not None and "time limit of 0.001 s" in outcome.error, outcome
    # Checked after every step, not once an epoch (22 steps): the first step is past 1 ms
    # whatever the machine (a 1 s limit was not, with data and compiled steps cached).
    assert outcome.error.endswith("(stopped at step 1)"), outcome.error


def test_exports_and_reports_are_world_readable(tmp_path):
    from nas.search.store.study import Study

    study = Study.create(tmp_path / "s")
    cid = study.add(json.dumps({"format": "nas.graph"}))
    path = study.export(cid, tmp_path / "out.json")
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("size", [0, -4])
def test_nonpositive_sizes_are_refused_before_training(size):
    ops = [new_op("flat", OpType.FLATTEN, ["input"]),
           new_op("out", OpType.DENSE, ["flat"], op_kwargs={"features": size})]
    with pytest.raises(ValueError, match="'out' kwarg 'features'"):
        new_graph(["input"], ["out"], ops)


def test_over_budget_plain_candidate_is_recorded_infeasible_before_any_step(tmp_path):
    """A seed that is not reversible and whose standard step exceeds the device budget is
    stored `infeasible`, its message carrying the estimate and the budget, and nothing of
    it was trained (no metrics or checkpoint file was written)."""
    from nas.search.execution.driver import Driver, SearchFailed
    from nas.search.execution.task import candidate_dir

    config = tiny_search_config(max_candidates=1)
    config.train.trainer = "auto"
    config.train.device_memory_budget = 2**20
    with pytest.raises(SearchFailed, match="infeasible"):
        Driver(config, str(tmp_path / "study")).run(progress=False)
    from nas.search import Study

    (candidate,) = Study.load(str(tmp_path / "study")).candidates()
    assert candidate.status == "infeasible", candidate.error
    assert "not reversible" in candidate.error
    assert "(1048576 bytes)" in candidate.error  # the budget
    need = int(candidate.error.split("MiB per device (")[1].split(" bytes")[0])
    assert need > 2**20  # the estimate
    run = os.path.join(candidate_dir(str(tmp_path / "study"), 1), "train")
    assert not [f for _, _, files in os.walk(run) for f in files]  # no metrics, no checkpoint


def test_budget_rejection_survives_a_worker_process_boundary():
    """Local workers hand exceptions back pickled: the rejection keeps its numbers."""
    import pickle

    from nas.train.memory import DeviceBudgetExceeded

    error = pickle.loads(pickle.dumps(DeviceBudgetExceeded(5 * 2**20, 2**20)))
    assert (error.need, error.budget) == (5 * 2**20, 2**20)
    message, infeasible = describe_failure(error)
    assert infeasible and "(5242880 bytes)" in message and "(1048576 bytes)" in message
