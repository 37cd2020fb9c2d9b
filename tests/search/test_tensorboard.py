"""`search.tensorboard=True`: the candidates', the study's and the finals' TensorBoard runs,
read back with TensorBoard's own reader; the setting checked at the edge."""

from __future__ import annotations

import json
import math
import os
import sys

import ml_collections
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nas.search.execution.driver import Driver
from nas.search.execution.tensorboard_runs import RunWriter, candidate_run, root, round_folder
from nas.search.store.finals import FinalsStore
from nas.search.store.study import Study
from nas.search.strategy.settings import validate_search
from tests.search.conftest import tiny_search_config

# one finalist and the seed, once each on the validation split: two finals runs
FINALS = {"k": 1, "repeats": 1, "folds": 1, "min_run_df": 0, "take_home": False}


def scalars(folder: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the TensorBoard run in `folder`."""
    board = EventAccumulator(folder)
    board.Reload()
    return {tag: [(e.step, e.value) for e in board.Scalars(tag)]
            for tag in board.Tags()["scalars"]}


def metrics_records(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # four trainings in a spawned worker: about two minutes on 2 loaded cores
def test_a_search_in_worker_processes_writes_every_run(tmp_path):
    workdir = str(tmp_path / "study")
    config = tiny_search_config(max_candidates=2, executor="local", workers=1,
                                tensorboard=True, log_every_steps=2, finals=FINALS)
    study = Driver(config, workdir).run(progress=False)
    done = study.candidates("done")
    assert len(done) == 2
    runs = sorted(os.listdir(root(workdir)))
    assert runs == sorted([os.path.basename(candidate_run(workdir, c.id)) for c in done]
                          + ["finals", "study"])

    # each candidate's curves, step by step as its metrics.jsonl has them
    for c in done:
        curves = scalars(candidate_run(workdir, c.id))
        logged = [r for r in metrics_records(os.path.join(workdir, "candidates", str(c.id),
                                                          "train"))
                  if "training_loss" in r]
        assert [s for s, _ in curves["train/loss"]] == [r["step"] for r in logged]
        for (_, value), r in zip(curves["train/loss"], logged, strict=True):
            assert value == pytest.approx(r["training_loss"], rel=1e-6)
        assert all(v > 0 for _, v in curves["train/learning_rate"])
        assert all(math.isfinite(v) for _, v in curves["validation/loss"])
        # the last validation accuracy is the one the study recorded
        assert curves["validation/accuracy"][-1][1] == pytest.approx(c.accuracy, abs=1e-6)

    # the study's progress against finished candidates
    progress = scalars(os.path.join(root(workdir), "study"))
    assert [s for s, _ in progress["candidates/done"]] == [1, 2]
    assert [v for _, v in progress["candidates/done"]] == [1.0, 2.0]
    assert [v for _, v in progress["candidates/failed"]] == [0.0, 0.0]
    assert progress["candidates/refused"][-1][1] == sum(
        n for kinds in study.refusal_counts().values() for n in kinds.values())
    seed = next(c for c in done if c.parent_id is None)
    assert progress["best/validation_accuracy"][0][1] == pytest.approx(seed.accuracy, abs=1e-6)
    assert progress["best/validation_accuracy"][-1][1] == pytest.approx(
        max(c.accuracy for c in done), abs=1e-6)
    for cost in ("flops", "params"):
        volume = [v for _, v in progress[f"front/hypervolume_{cost}"]]
        # the seed alone: its accuracy over costs from its own to twice it
        assert volume[0] == pytest.approx(seed.accuracy, abs=1e-6)
        assert volume[1] >= volume[0] - 1e-6  # a front only grows

    # each finals run has a run of its own with its curves
    finals = FinalsStore(Study.load(workdir).path).runs(kind="finals")
    assert len(finals) == 2 and all(r.status == "done" for r in finals)
    assert sorted(os.listdir(os.path.join(root(workdir), "finals"))) == \
        sorted(r.name for r in finals)
    for r in finals:
        curves = scalars(os.path.join(root(workdir), "finals", r.name))
        assert curves["train/loss"] and 0.0 <= curves["validation/accuracy"][-1][1] <= 1.0


def test_a_search_of_its_seed_alone_writes_its_run_and_the_studys(tmp_path):
    """In the default suite (the search above is slow): one candidate, trained inline."""
    workdir = str(tmp_path / "study")
    config = tiny_search_config(max_candidates=1, tensorboard=True, log_every_steps=4)
    seed = Driver(config, workdir).run(progress=False).candidates("done")[0]
    assert sorted(os.listdir(root(workdir))) == ["candidate-0001", "study"]
    curves = scalars(candidate_run(workdir, seed.id))
    assert len(curves["train/loss"]) >= 2
    assert curves["validation/accuracy"][-1][1] == pytest.approx(seed.accuracy, abs=1e-6)
    progress = scalars(os.path.join(root(workdir), "study"))
    assert progress["candidates/done"] == [(1, 1.0)]
    assert progress["front/hypervolume_flops"][0][1] == pytest.approx(seed.accuracy, abs=1e-6)


def test_a_run_holds_what_the_records_hold(tmp_path):
    """metrics.jsonl's records as the trainer writes them: numbers at their step, each
    under its tag; the final summary and non-numbers are not curves."""
    folder = str(tmp_path / "candidate-0001")
    records = [{"step": 2, "training_loss": 2.25, "training_accuracy": 0.25,
                "learning_rate": 0.002, "l2_grads": 1.5},
               {"step": 4, "training_loss": 1.75, "learning_rate": 0.001,
                "note": "text", "diverged": float("nan")},
               {"step": 4, "epoch": 1, "accuracy": 0.75, "loss": 0.5},
               {"step": 4, "epoch": 1, "final": {"accuracy": 0.75}}]
    with RunWriter(folder) as board:
        for record in records:
            board.record(record)
    curves = scalars(folder)
    assert curves["train/loss"] == [(2, 2.25), (4, 1.75)]
    assert curves["train/accuracy"] == [(2, 0.25)]
    assert curves["train/gradient_norm"] == [(2, 1.5)]
    assert [s for s, _ in curves["train/learning_rate"]] == [2, 4]
    assert curves["validation/accuracy"] == [(4, 0.75)]
    assert curves["validation/loss"] == [(4, 0.5)]
    assert not any("note" in t or "diverged" in t or "final" in t or "epoch" in t
                   for t in curves)


def test_a_resumed_run_shows_each_step_once_the_newest(tmp_path):
    """A candidate killed past step 6 resumes from its checkpoint at step 4: the steps the
    killed attempt logged from there are replaced, as its metrics.jsonl's last wins."""
    folder = str(tmp_path / "candidate-0003")
    with RunWriter(folder) as board:
        for step in (2, 4, 6):
            board.record({"step": step, "training_loss": float(step)})
    with RunWriter(folder) as board:
        for step in (6, 8):
            board.record({"step": step, "training_loss": 10.0 + step})
    assert len(os.listdir(folder)) == 2
    assert scalars(folder)["train/loss"] == [(2, 2.0), (4, 4.0), (6, 16.0), (8, 18.0)]


def test_a_run_that_logs_nothing_leaves_no_folder(tmp_path):
    """A child refused before its first step: no empty run in TensorBoard's list."""
    folder = str(tmp_path / "candidate-0002")
    with RunWriter(folder) as board:
        board.record({"step": 3, "final": {"acc": 0.5}})
    assert not os.path.exists(folder)


def test_a_seeds_later_rounds_are_runs_of_their_own(tmp_path):
    run, train = str(tmp_path / "tb" / "candidate-0001"), str(tmp_path / "c1" / "train")
    assert round_folder(run, train, train) == run
    assert round_folder(run, train, os.path.join(train, "round2")) == \
        os.path.join(run, "round2")
    assert round_folder(None, train, os.path.join(train, "round2")) is None


def with_search(**fields) -> ml_collections.ConfigDict:
    """The tiny config with search fields set as a user's own dict sets them (untyped)."""
    config = tiny_search_config()
    config.search = ml_collections.ConfigDict({**config.search.to_dict(), **fields})
    return config


@pytest.mark.parametrize("value", ["yes", 1, None, [True]])
def test_a_bad_setting_is_one_line(value):
    with pytest.raises(ValueError) as e:
        validate_search(with_search(tensorboard=value))
    text = str(e.value)
    assert "\n" not in text and "'search.tensorboard' must be a bool" in text, text


def test_off_by_default_and_on_with_the_writer_installed():
    assert validate_search(tiny_search_config()).tensorboard is False
    assert validate_search(with_search(tensorboard=True)).tensorboard is True


def test_a_missing_writer_says_what_to_install(monkeypatch, tmp_path):
    """No tensorboardX (an import of it fails, as where it is not installed): one line with
    the pip install, before anything is written."""
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ValueError) as e:
        Driver(with_search(tensorboard=True), str(tmp_path / "study"))
    text = str(e.value)
    assert "\n" not in text and "pip install 'alphanas-search[tensorboard]'" in text, text
    assert not (tmp_path / "study").exists()


def test_a_ray_tasks_run_comes_back_with_it(tmp_path):
    """What a Ray task runs on its node (`ray_parts.run_task`, here in this process): its
    TensorBoard run is written in the node's folder, not at the driver's path, and comes
    back as files that the executor writes there."""
    pytest.importorskip("ray")
    from nas.search.execution.ray_parts import run_task, write_files
    from nas.search.execution.task import Failure

    workdir = str(tmp_path / "study")
    driver = Driver(tiny_search_config(tensorboard=True, log_every_steps=4), workdir)
    driver.seed_population()
    task = driver.task(1)
    assert task.tensorboard == candidate_run(workdir, 1)
    result, _, _, curves = run_task(task, {}, None, None)
    assert not isinstance(result, Failure), result
    assert not os.path.exists(task.tensorboard)  # nothing written past the node's folder
    assert curves is not None and curves.entries
    write_files(curves, task.tensorboard)
    accuracy = scalars(task.tensorboard)["validation/accuracy"]
    assert accuracy[-1][1] == pytest.approx(result[0]["accuracy"], abs=1e-6)
