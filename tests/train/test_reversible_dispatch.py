"""`train_and_eval` hands reversible candidates to the reversible trainer."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import tiny_config

from nas.train import TrainOptions, train_and_eval
from nas.train.memory import DeviceBudgetExceeded, select_trainer
from nas.zoo import revnet


def test_auto_selects_by_memory_budget():
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    config = tiny_config("", trainer="auto", device_memory_budget=1, num_classes=10)
    assert select_trainer(config, graph, constants) == "reversible"  # 1 byte: nothing fits
    config = tiny_config("", trainer="auto", device_memory_budget=2**40, num_classes=10)
    assert select_trainer(config, graph, constants) == "standard"
    config = tiny_config("", trainer="standard", device_memory_budget=1, num_classes=10)
    assert select_trainer(config, graph, constants) == "standard"


def test_plain_graph_over_the_budget_fails_before_any_data_or_step(tmp_path):
    """train_and_eval rejects it before reading data (the data dir does not even exist)."""
    from nas.zoo import cnn

    plain, plain_consts, _ = cnn.CifarNet()
    config = tiny_config(str(tmp_path / "no_data_here"), trainer="auto",
                         device_memory_budget=1)
    with pytest.raises(DeviceBudgetExceeded, match="not reversible"):
        train_and_eval(config, options=TrainOptions(graph=plain, constants=plain_consts,
                                                    workdir=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists() and not (tmp_path / "no_data_here").exists()


@pytest.mark.slow
def test_train_and_eval_runs_the_reversible_trainer(data_dir, tmp_path):
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    config = tiny_config(data_dir, trainer="reversible", **{"input.image_size": 16})
    config.total_epochs = 0.1
    metrics, epochs, state = train_and_eval(config,
                                            options=TrainOptions(graph=graph, constants=constants,
                                                                 workdir=str(tmp_path)))
    assert metrics.steps >= 1 and 0.0 <= metrics.acc <= 1.0
    assert metrics.train_temp_bytes > 0 and np.isfinite(metrics.loss)
    assert "block0/rev0/f/conv" in state["params"]
    assert (tmp_path / "checkpoints").is_dir()


def test_reversible_trainer_rejects_plain_graph(data_dir):
    from nas.zoo import cnn

    graph, constants, _ = cnn.CifarNet()
    config = tiny_config(data_dir, trainer="reversible")
    with pytest.raises(ValueError, match="not marked reversible"):
        train_and_eval(config, options=TrainOptions(graph=graph, constants=constants))
