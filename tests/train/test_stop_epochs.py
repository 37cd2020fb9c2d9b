"""A run trained in pieces (`stop_epochs`, as multi-fidelity rungs do) ends exactly where one
uninterrupted run ends: the schedule spans the whole budget and each piece resumes from the
checkpoint of the one before."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import tiny_config, tiny_graph

from nas.train import TrainOptions, train_and_eval


# device-resident feed; the grain feed (its iterator state checkpointed) is slower
@pytest.mark.parametrize("feed_bytes", [1 << 30, pytest.param(0, marks=pytest.mark.slow)])
def test_rungs_resume_to_the_uninterrupted_result(data_dir, tmp_path, feed_bytes):
    graph, constants = tiny_graph(with_bn=True)
    config = tiny_config(data_dir, total_epochs=0.3)
    config.input.device_data_bytes = feed_bytes
    config.schedule = {"decay_type": "cosine", "warmup_steps": 1}
    whole, _, ref = train_and_eval(config, options=TrainOptions(
        graph=graph, constants=constants, workdir=str(tmp_path / "whole")))
    rungs = TrainOptions(graph=graph, constants=constants, workdir=str(tmp_path / "rungs"))
    first, _, _ = train_and_eval(config, options=replace(rungs, stop_epochs=0.1))
    assert first.steps == 2 < whole.steps == 6  # 22.5 steps per epoch
    # a rung re-run after a kill: no training
    again, _, _ = train_and_eval(config, options=replace(rungs, stop_epochs=0.1))
    assert again.steps == 2 and again.train_seconds == 0.0 and again.acc == first.acc
    last, _, state = train_and_eval(config, options=rungs)
    assert last.steps == whole.steps and last.acc == pytest.approx(whole.acc, abs=1e-6)
    for op, values in ref["params"].items():
        for name, value in values.items():
            np.testing.assert_allclose(state["params"][op][name], value, rtol=1e-5, atol=1e-6)


def test_stop_epochs_must_be_positive(data_dir, tmp_path):
    graph, constants = tiny_graph()
    with pytest.raises(ValueError, match="stop_epochs: expected a number of epochs > 0"):
        train_and_eval(tiny_config(data_dir),
                       options=TrainOptions(graph=graph, constants=constants, stop_epochs=0.0))
