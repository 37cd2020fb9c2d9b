"""`train_and_eval` hands reversible candidates to the reversible trainer."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import tiny_config

from nas.train import revrun, train_and_eval
from nas.zoo import revnet


def test_auto_selects_by_memory_budget():
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    config = tiny_config("", trainer="auto", device_memory_budget=1)
    assert revrun.use_reversible(config, graph, constants)  # 1 byte: nothing fits
    config = tiny_config("", trainer="auto", device_memory_budget=2**40)
    assert not revrun.use_reversible(config, graph, constants)
    config = tiny_config("", trainer="standard", device_memory_budget=1)
    assert not revrun.use_reversible(config, graph, constants)
    from nas.zoo import cnn

    plain, plain_consts, _ = cnn.CifarNet()
    config = tiny_config("", trainer="auto", device_memory_budget=1)
    assert not revrun.use_reversible(config, plain, plain_consts)  # not reversible


@pytest.mark.slow
def test_train_and_eval_runs_the_reversible_trainer(data_dir, tmp_path):
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    config = tiny_config(data_dir, trainer="reversible", **{"input.image_size": 16})
    config.total_epochs = 0.1
    metrics, epochs, state = train_and_eval(config, graph=graph, constants=constants,
                                            workdir=str(tmp_path))
    assert metrics.steps >= 1 and 0.0 <= metrics.acc <= 1.0
    assert metrics.train_temp_bytes > 0 and np.isfinite(metrics.loss)
    assert "block0/rev0/f/conv" in state["params"]
    assert (tmp_path / "checkpoints").is_dir()


def test_reversible_trainer_rejects_plain_graph(data_dir):
    from nas.zoo import cnn

    graph, constants, _ = cnn.CifarNet()
    config = tiny_config(data_dir, trainer="reversible")
    with pytest.raises(ValueError, match="not marked reversible"):
        train_and_eval(config, graph=graph, constants=constants)
