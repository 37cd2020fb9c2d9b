"""A resumed run's schedule: its own length, and checkpoints written before the schedule's
lengths were part of the optimizer state."""

from __future__ import annotations

import jax
import numpy as np
from helpers import tiny_config, tiny_graph

from nas.train import TrainOptions, optim, train_and_eval
from nas.train.checkpoint import Checkpointer


def _train(data_dir, workdir, epochs):
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=epochs, ckpt_steps=2)
    return train_and_eval(config, eval_perf=False, options=TrainOptions(
        graph=graph, constants=constants, workdir=str(workdir)))


def test_a_checkpoint_of_the_earlier_structure_resumes_as_one_of_today(data_dir, tmp_path,
                                                                       monkeypatch):
    """Checkpoints whose schedule state is optax's count alone (as written before the
    lengths joined it) resume to the same weights as today's; both resumed runs take their
    length from the resuming config (twice the first runs')."""
    saved = []
    save = Checkpointer.save

    def save_as_before(self, step, state, meta, force=False):
        earlier, _ = optim.before_run_lengths(state)
        saved.append(earlier)
        return save(self, step, earlier, meta, force)

    _train(data_dir, tmp_path / "now", 0.2)
    monkeypatch.setattr(Checkpointer, "save", save_as_before)
    first, _, _ = _train(data_dir, tmp_path / "before", 0.2)
    monkeypatch.undo()
    assert saved and not any(isinstance(n, optim.RunScheduleState) for n in jax.tree.leaves(
        saved[-1], is_leaf=lambda n: isinstance(n, optim.RunScheduleState)))

    now, _, a = _train(data_dir, tmp_path / "now", 0.4)
    before, _, b = _train(data_dir, tmp_path / "before", 0.4)
    assert before.steps == now.steps > first.steps
    for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"]), strict=True):
        np.testing.assert_array_equal(x, y)
