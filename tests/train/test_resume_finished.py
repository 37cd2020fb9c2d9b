"""A run resumed after its last step trains nothing and evaluates the restored weights."""

import numpy as np
from helpers import tiny_config, tiny_graph

from nas.train import TrainOptions, train_and_eval


def test_resume_after_the_last_step_only_evaluates(data_dir, tmp_path):
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.2)
    options = TrainOptions(graph=graph, constants=constants, workdir=str(tmp_path))
    done, _, state = train_and_eval(config, options=options)
    again, _, state2 = train_and_eval(config, options=options)
    assert again.steps == done.steps and again.train_seconds == 0.0
    assert again.acc == done.acc and again.flops == done.flops > 0
    for op, values in state["params"].items():
        for name, value in values.items():
            np.testing.assert_array_equal(state2["params"][op][name], value)
