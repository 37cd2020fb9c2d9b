"""Knowledge distillation with `nas.run_search`: a loss that sees the batch, a teacher
closed over (its parameters in the closure, applied inside the compiled step), and
per-example extras; each mistake one line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

import nas

TEMPERATURE = 4.0


class Small(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


def digits(n=400):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.repeat(np.uint8(d.images * 255 / 16)[..., None], 3, axis=-1)[:n]
    y = d.target[:n]
    return x[:300], y[:300], x[300:], y[300:]


def distillation_loss(teacher, teacher_variables, temperature, alpha):
    """alpha * cross-entropy + (1 - alpha) * T^2 * KL(teacher || student) at temperature T,
    the teacher applied to the images the student saw."""
    def loss(logits, labels, batch):
        t = jax.lax.stop_gradient(teacher.apply(teacher_variables, batch["images"]))
        soft = jax.nn.softmax(t / temperature)
        kl = jnp.sum(soft * (jnp.log(soft + 1e-9) - jax.nn.log_softmax(logits / temperature)),
                     axis=-1)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.mean(alpha * ce + (1 - alpha) * temperature**2 * kl)

    return loss


OVERRIDES = {"train.total_epochs": 0.5, "search.seed_epochs": 0.5, "train.ckpt_steps": 0,
             "search.executor": "inline", "train.input.batch_size": 16,
             "search.selection.min_acc": 0.0,
             "search.fit": {"steps": 2, "batches": 1, "batch_size": 8, "bn_batch_size": 16}}


@pytest.fixture(scope="module")
def seed_and_teacher():
    x = jnp.zeros((1, 8, 8, 3))
    variables = Small().init(jax.random.PRNGKey(0), x)
    return nas.from_flax(Small(), x, variables=variables), variables


@pytest.mark.slow
def test_a_search_distills_from_a_closed_over_teacher(seed_and_teacher, tmp_path,
                                                      monkeypatch):
    """The teacher is the seed itself: pure distillation (alpha 0) starts at a KL of 0, so
    the seed's reported loss stays far below the cross-entropy it would report (about
    2.3 for 10 classes), which it could not without the teacher in the step."""
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    seed, variables = seed_and_teacher
    loss = distillation_loss(Small(), variables, TEMPERATURE, alpha=0.0)
    result = nas.run_search(seed, digits(), workdir=tmp_path / "study", max_candidates=2,
                            loss=loss, overrides=OVERRIDES, progress=False)
    rows = result.candidates()
    assert [c.status for c in rows] == ["done", "done"], [c.error for c in rows]
    assert 0.0 <= rows[0].loss < 0.5, rows[0].loss
    assert all(np.isfinite(c.loss) for c in rows)


def test_soft_labels_given_as_an_extra_reach_the_loss(seed_and_teacher, tmp_path,
                                                      monkeypatch):
    """A teacher's soft labels computed ahead, one row per training example: `ce +
    mean(w)` with w = 3 reports every loss >= 3, and the soft labels equal the one-hot
    labels, so KL to them is the cross-entropy."""
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    seed, _ = seed_and_teacher
    data = digits()
    soft = np.eye(10, dtype=np.float32)[data[1]]

    def loss(logits, labels, batch):
        targets = optax.softmax_cross_entropy(logits, batch["soft"])
        return jnp.mean(targets) + jnp.mean(batch["w"])

    result = nas.run_search(seed, data, workdir=tmp_path / "study", max_candidates=1,
                            loss=loss, overrides=OVERRIDES, progress=False,
                            extras={"soft": soft, "w": np.full(300, 3.0)})
    (seed_row,) = result.candidates()
    assert seed_row.status == "done", seed_row.error
    assert 3.0 <= seed_row.loss < 3.0 + 5.0


def _reads(name):
    def loss(logits, labels, batch):
        return jnp.mean(logits) + jnp.mean(batch[name])

    return loss


MISTAKES = {
    "missing": (dict(loss=_reads("teacher"), extras={"w": np.ones(300)}),
                r"^loss: reads batch\['teacher'\], which the data does not carry \(the batch "
                r"has 'images', 'labels', 'w'\)"),
    "length": (dict(loss=_reads("w"), extras={"w": np.ones(299)}),
               r"^extras\['w'\]: length 299, expected one row per training example \(300"),
    "name": (dict(loss=_reads("w"), extras={"labels": np.ones(300)}),
             r"^extras: an extra's name must be an identifier other than images, labels"),
    "trace": (dict(loss=lambda logits, labels, batch: logits @ batch["w"],
                   extras={"w": np.ones((300, 3))}),
              r"^loss: .* fails to trace on logits \(2, 10\) float32 and labels \(2,\) int32 "
              r"and a batch of images, labels, w: TypeError"),
    "not arrays": (dict(loss=_reads("w"), extras={"w": np.ones(300)}, data="digits"),
                   r"^extras: need data given as arrays or 'npz:FILE'"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_with_extras_is_one_line(mistake, seed_and_teacher, tmp_path,
                                              monkeypatch):
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    given, message = MISTAKES[mistake]
    kwargs = dict(seed=seed_and_teacher[0], data=digits(), max_candidates=1, progress=False,
                  overrides=OVERRIDES)
    kwargs.update(given)
    with pytest.raises(ValueError, match=message) as raised:
        nas.run_search(workdir=tmp_path / "study", **kwargs)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "study").exists()
