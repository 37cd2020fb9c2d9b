"""`TrainOptions`: the one value that says how `train_and_eval` runs. The defaults train as
no options do; a bad field fails in one line naming it, before any data is read."""

import contextlib
import dataclasses
import inspect
import pathlib

import numpy as np
import pytest
from helpers import tiny_config

from nas.train import TrainOptions, train_and_eval

FIELDS = ["graph", "constants", "workdir", "init_variables", "freeze", "freeze_inherited",
          "should_stop", "device_data_cache", "stop_epochs", "refit", "device_stage",
          "progress", "functions", "evaluate_start", "min_start_accuracy", "on_record"]


def test_train_and_eval_takes_the_reference_arguments_and_one_options_value():
    params = inspect.signature(train_and_eval).parameters
    assert list(params) == ["config", "eval_perf", "callback", "options"]
    assert params["options"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["options"].default is None
    assert [f.name for f in dataclasses.fields(TrainOptions)] == FIELDS


def test_the_defaults_train_like_no_options(data_dir):
    """The config's zoo model (no graph given), a few steps: the same numbers both ways."""
    config = tiny_config(data_dir, total_epochs=0.1, seed=3)
    plain, plain_epochs, plain_state = train_and_eval(config, eval_perf=False)
    given, given_epochs, given_state = train_and_eval(config, False, None,
                                                      options=TrainOptions())
    assert plain.steps == given.steps == 2 and plain_epochs == given_epochs
    assert given.acc == pytest.approx(plain.acc, abs=1e-6)
    assert given.loss == pytest.approx(plain.loss, rel=1e-5)
    for op, values in plain_state["params"].items():
        for name, value in values.items():
            np.testing.assert_allclose(given_state["params"][op][name], value,
                                       rtol=1e-5, atol=1e-6)


def test_values_are_settled_when_made():
    options = TrainOptions(freeze=["conv", "conv"], workdir=pathlib.Path("/tmp/run"),
                           stop_epochs=2)
    assert options.freeze == frozenset({"conv"}) and options.workdir == "/tmp/run"
    assert TrainOptions().freeze == frozenset()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.workdir = "elsewhere"  # type: ignore[misc]
    derived = dataclasses.replace(options, stop_epochs=None)
    assert derived.stop_epochs is None and derived.freeze == options.freeze


@pytest.mark.parametrize("field, value, expected", [
    ("stop_epochs", -1, "a number of epochs > 0"),
    ("stop_epochs", 0, "a number of epochs > 0"),
    ("stop_epochs", float("inf"), "a number of epochs > 0"),
    ("stop_epochs", float("nan"), "a number of epochs > 0"),
    ("stop_epochs", True, "a number of epochs > 0"),
    ("stop_epochs", "1", "a number of epochs > 0"),
    ("freeze", "conv", "a collection of op names"),
    ("freeze", 3, "a collection of op names"),
    ("freeze", {"conv", 1}, "op names (str)"),
    ("freeze_inherited", "yes", "True or False"),
    ("evaluate_start", 1, "True or False"),
    ("min_start_accuracy", "0.5", "an accuracy (or None)"),
    ("min_start_accuracy", float("nan"), "an accuracy (or None)"),
    ("progress", "no", "True, False or None"),
    ("workdir", 7, "a directory path"),
    ("init_variables", [1, 2], "a mapping"),
    ("functions", ["loss"], "a mapping"),
    ("should_stop", 5, "a function"),
    ("refit", "fit", "a function"),
    ("on_record", "log", "a function"),
    ("device_stage", object(), "a context manager"),
])
def test_a_bad_field_is_one_line_naming_it(field, value, expected):
    with pytest.raises(ValueError) as e:
        TrainOptions(**{field: value})
    message = str(e.value)
    assert f"TrainOptions.{field}: expected {expected}" in message, message
    assert "\n" not in message


def test_a_good_value_of_every_kind_is_taken():
    TrainOptions(stop_epochs=0.5, freeze=("a",), freeze_inherited=True, evaluate_start=True,
                 min_start_accuracy=0.4,
                 progress=False, workdir="/tmp/x", init_variables={"params": {}},
                 functions={}, should_stop=lambda step: False,
                 refit=lambda variables, built: variables,
                 device_stage=contextlib.nullcontext(), on_record=print)


def test_a_start_below_min_start_accuracy_is_refused_before_any_step(data_dir, tmp_path):
    """A search's child that cannot start near its parent is not trained."""
    from nas.train.train import PoorStartError

    config = tiny_config(data_dir, total_epochs=0.1, seed=3)
    _, _, state = train_and_eval(config, False, options=TrainOptions())
    steps = []
    options = TrainOptions(init_variables=state, evaluate_start=True, min_start_accuracy=1.01,
                           workdir=str(tmp_path / "refused"),
                           should_stop=lambda step: steps.append(step) or False)
    with pytest.raises(PoorStartError, match=r"at its start, 0\.\d+, is below 1\.010"):
        train_and_eval(config, False, options=options)
    assert steps == []  # not one step was taken
    metrics, _, _ = train_and_eval(config, False, options=dataclasses.replace(
        options, min_start_accuracy=0.0, workdir=str(tmp_path / "kept")))
    assert metrics.steps == 2 and 0 <= metrics.start_acc <= 1
    assert steps  # the same check was called on each step of the run that went on


def test_on_record_gets_each_record_metrics_jsonl_gets(data_dir, tmp_path):
    """A search worker mirrors the curves from it (TensorBoard), without reading the file."""
    import json

    config = tiny_config(data_dir, total_epochs=0.1, seed=3, log_training_steps=1)
    seen = []
    train_and_eval(config, False, options=TrainOptions(workdir=str(tmp_path),
                                                       on_record=seen.append))
    with open(tmp_path / "metrics.jsonl") as f:
        assert [json.loads(line) for line in f] == json.loads(json.dumps(seen))
    assert any("training_loss" in r for r in seen) and any("accuracy" in r for r in seen)


def test_train_and_eval_refuses_what_is_not_options(data_dir):
    config = tiny_config(data_dir)
    with pytest.raises(ValueError, match="train_and_eval: options: expected a TrainOptions"):
        train_and_eval(config, options={"workdir": "/tmp/x"})
    with pytest.raises(TypeError):  # the old keywords are gone: one options value instead
        train_and_eval(config, workdir="/tmp/x")
