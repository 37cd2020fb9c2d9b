"""A user's loss and cost reach Ray tasks by value, as they reach local worker processes."""

import os

import numpy as np
import pytest

import nas
from tests.search._user_functions import OFFSET, offset_loss

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # a local Ray and a search: the Ray executor's own test stays in the default
def test_ray_tasks_train_with_the_users_loss_and_measure_the_users_cost(tmp_path,
                                                                         monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    scale = 3.0  # closed over: it travels with the cost

    def kilo_params(candidate):
        return scale * sum(np.size(p) for p in
                           __import__("jax").tree.leaves(candidate.variables["params"])) / 1e3

    overrides = {"train.total_epochs": 0.25, "search.seed_epochs": 0.25,
                 "search.seed_max_epochs": 0.0, "search.min_child_steps": 0,
                 "train.ckpt_steps": 0, "search.executor": "ray",
                 "search.selection.min_acc": 0.0, "search.pipeline_depth": 1,
                 "search.fit": {"steps": 2, "batches": 1, "batch_size": 8,
                                "bn_batch_size": 16}}
    try:  # the executor starts its own local Ray, as for a user
        result = nas.run_search("cnn", "digits", workdir=tmp_path / "study", max_candidates=2,
                                config=os.path.join(ROOT, "configs", "digits_cnn_search.py"),
                                overrides=overrides, loss=offset_loss,
                                costs={"kilo_params": kilo_params}, progress=False)
    finally:
        ray.shutdown()
    done = result.candidates("done")
    assert len(done) == 2, [c.error for c in result.candidates()]
    for c in done:
        assert c.loss > OFFSET
        assert c.metrics["kilo_params"] == pytest.approx(scale * c.params / 1e3)


def offset_from_the_batch(logits, labels, batch):
    """Cross-entropy plus the batch's mean `offset` extra (OFFSET for every example)."""
    import optax

    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return ce + batch["offset"].mean()


@pytest.mark.slow  # a local Ray and a search on arrays
def test_ray_tasks_get_the_extras_with_the_data(tmp_path, monkeypatch):
    """Extras are stored with the examples (the npz the arrays are saved as), so a Ray task
    that gets the data gets them: every reported loss carries the offset."""
    ray = pytest.importorskip("ray")
    from sklearn.datasets import load_digits

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    d = load_digits()
    x = np.repeat(np.uint8(d.images * 255 / 16)[..., None], 3, axis=-1)
    test = np.arange(len(x)) % 5 == 0
    data = (x[~test], d.target[~test], x[test], d.target[test])
    overrides = {"train.total_epochs": 0.25, "search.seed_epochs": 0.25,
                 "train.ckpt_steps": 0, "search.executor": "ray",
                 "search.selection.min_acc": 0.0, "search.pipeline_depth": 1,
                 "search.fit": {"steps": 2, "batches": 1, "batch_size": 8,
                                "bn_batch_size": 16}}
    try:
        result = nas.run_search("cnn", data, workdir=tmp_path / "study", max_candidates=2,
                                overrides=overrides, loss=offset_from_the_batch,
                                extras={"offset": np.full(len(data[0]), OFFSET)},
                                progress=False)
    finally:
        ray.shutdown()
    done = result.candidates("done")
    assert len(done) == 2, [c.error for c in result.candidates()]
    assert all(c.loss > OFFSET for c in done)
