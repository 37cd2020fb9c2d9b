"""Per-example extras and a loss that sees the batch (`nas.train.extras`): an npz's extra
arrays reach the loss row by row, through shuffling, the devices and the validation split."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import tiny_config, tiny_graph
from userdata_helpers import digits_arrays, write_npz

from nas.train import TrainOptions, extras, train_and_eval


def ce(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def weighted_and_aligned(logits, labels, batch):
    """ce + mean(w) (w = 3 everywhere) + a large penalty when an example's copy of its
    label is not its label: the loss is >= 3, and near ce + 3 only if every extra row
    travelled with its own example."""
    off = jnp.mean(jnp.abs(batch["label_copy"] - labels.astype(jnp.float32)))
    assert batch["images"].ndim == 4
    return ce(logits, labels) + jnp.mean(batch["w"]) + 100.0 * off


def test_the_losss_arity_is_read_from_its_signature():
    assert not extras.takes_batch(ce)
    assert extras.takes_batch(weighted_and_aligned)
    assert extras.takes_batch(lambda *args: 0.0)
    assert extras.takes_batch(lambda logits, labels, batch=None: 0.0)
    assert not extras.takes_batch(optax.softmax_cross_entropy_with_integer_labels)


def _npz(tmp_path, **more):
    arrays = digits_arrays(8)
    n = len(arrays["x_train"])
    arrays["w"] = np.full(n, 3.0)
    arrays["label_copy"] = arrays["y_train"].astype(np.float64)
    arrays.update(more)
    return "npz:" + write_npz(str(tmp_path / "d.npz"), arrays)


@pytest.mark.parametrize("device_data_bytes", [0, 2**30])
def test_extras_follow_their_examples_into_the_training_and_validation_loss(
        tmp_path, device_data_bytes):
    config = tiny_config(str(tmp_path / "tfds"), **{
        "input.data.name": _npz(tmp_path), "input.image_size": 8,
        "input.device_data_bytes": device_data_bytes,
        "input.data.validation_fraction": 0.2, "eval.data.split": "holdout",
        "eval.test_split": "test", "total_epochs": 2.0})
    graph, constants = tiny_graph()
    metrics, _, _ = train_and_eval(config, eval_perf=False,
                                   options=TrainOptions(graph=graph, constants=constants,
                                                        workdir=str(tmp_path / "run"),
                                                        functions={"loss": weighted_and_aligned}))
    # validation: the same loss, w = 3 and every label copy aligned
    assert 3.0 <= metrics.loss < 3.0 + 5.0, metrics.loss
    assert metrics.test_acc > 0.0
    assert metrics.test_loss == -1.0  # the test split has no extras: not measured
    lines = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    training = [r["training_loss"] for r in lines if "training_loss" in r]
    assert training and all(3.0 <= v < 3.0 + 5.0 for v in training), training


def test_a_loss_reading_a_missing_extra_is_one_line(tmp_path):
    config = tiny_config(str(tmp_path / "tfds"), **{
        "input.data.name": _npz(tmp_path), "input.image_size": 8, "total_epochs": 0.1})
    graph, constants = tiny_graph()

    def reads_teacher(logits, labels, batch):
        return ce(logits, batch["teacher"])

    with pytest.raises(ValueError, match=r"^loss: reads batch\['teacher'\], which the data "
                                         r"does not carry .*'w'") as e:
        train_and_eval(config, eval_perf=False,
                       options=TrainOptions(graph=graph, constants=constants,
                                            functions={"loss": reads_teacher}))
    assert "\n" not in str(e.value)


def test_an_npz_extra_of_the_wrong_length_is_one_line(tmp_path):
    from nas.train import userfiles

    name = _npz(tmp_path, short=np.zeros(5))
    with pytest.raises(ValueError, match=r"d\.npz: extra array\['short'\]: length 5, "
                                         r"expected one row per training example"):
        userfiles.read("npz", name[4:])


def test_a_two_argument_loss_still_works_beside_extras(tmp_path):
    config = tiny_config(str(tmp_path / "tfds"), **{
        "input.data.name": _npz(tmp_path), "input.image_size": 8, "total_epochs": 0.2,
        "eval.test_split": "test"})
    graph, constants = tiny_graph()
    metrics, _, _ = train_and_eval(config, eval_perf=False,
                                   options=TrainOptions(graph=graph, constants=constants,
                                                        functions={"loss": ce}))
    assert 0 < metrics.loss < 3.0 and 0 < metrics.test_loss < 3.0
    assert jax.numpy.isfinite(metrics.test_loss)


@pytest.mark.slow
def test_the_command_line_names_extras_as_the_npz_files_arrays(tmp_path):
    """nas-train on an npz with an array `offset` (3.0 for every example) and a loss named
    on the command line that reads batch["offset"]: the validation loss shows it."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    arrays = digits_arrays(8)
    arrays["offset"] = np.full(len(arrays["x_train"]), 3.0)
    name = "npz:" + write_npz(str(tmp_path / "d.npz"), arrays)
    env = dict(os.environ, PYTHONPATH=root, NAS_DATA_DIR=str(tmp_path / "tfds"))
    run = subprocess.run(
        [sys.executable, "-m", "nas.train.cli", f"--config={root}/configs/digits_cnn.py",
         f"--config.input.data.name={name}", "--config.total_epochs=0.2",
         "--config.input.data.validation_fraction=0.2", "--config.eval.data.split=holdout",
         "--config.eval.test_split=test",
         "--config.loss=tests.search._user_functions:offset_from_the_batch",
         f"--workdir={tmp_path / 'run'}"], capture_output=True, text=True, env=env,
        timeout=900, cwd=root)
    assert run.returncode == 0, run.stderr[-3000:]
    loss = float(re.search(r"^validation loss\s+([\d.]+)", run.stdout, re.M).group(1))
    assert 3.0 <= loss < 3.0 + 5.0, run.stdout
    assert re.search(r"^test loss\s+not measured", run.stdout, re.M), run.stdout
