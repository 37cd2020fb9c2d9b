"""`nas.run_search`, the search from Python: a notebook user's whole flow, the same
candidates as `nas-search`, a callback that stops it, and every mistake one line.

The flow runs as a script (`_python_search.py`) so that its loss and cost live in
`__main__` and reach the two worker processes by value; it runs once per session and
each test reads what it reports.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

import nas
from nas.search.store.study import Study
from tests.search import _python_search as flow
from tests.search._user_functions import offset_loss

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def python_search(tmp_path_factory):
    folder = tmp_path_factory.mktemp("python_search")
    workdir, out = folder / "study", folder / "report.json"
    env = dict(os.environ, PYTHONPATH=ROOT, NAS_DATA_DIR=str(folder / "data"))
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "search",
                                                       "_python_search.py"),
                          str(workdir), str(out)], env=env, capture_output=True, text=True,
                         timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    return workdir, json.loads(out.read_text())


def test_a_flax_model_on_arrays_in_memory_searches_with_the_users_loss_and_cost(
        python_search):
    _, report = python_search
    rows = report["done"]["rows"]
    done = [r for r in rows if r["status"] == "done"]
    assert len(rows) == 4 and len(done) >= 3, rows  # the seed and at least 2 children
    for r in done:
        assert r["kilo_params"] is not None and r["kilo_params"] > 0, r
        assert r["loss"] > flow.OFFSET, r  # the user's loss, offset included, is reported
    assert report["done"]["front_kilo_params"]  # the user's cost is a front
    assert "kilo_params" in report["done"]["summary"]
    assert report["done"]["logits_shape"] == [3, 10]  # the recommended one runs on a batch
    assert report["done"]["recommended_metrics"]["kilo_params"] > 0


def test_a_callback_raising_stop_search_stops_there_and_the_next_call_resumes(python_search):
    _, report = python_search
    counts = report["stopped"]["counts"]
    assert len(report["stopped"]["told"]) == 2  # it stopped at the callback that raised
    assert report["stopped"]["report"]  # report/report.html written when it ended
    assert counts["running"] == 0  # every claim handed back
    assert counts["done"] + counts["failed"] == 2, counts
    assert len(report["done"]["rows"]) == 4  # resumed to the budget


def test_an_interrupt_stops_it_with_no_process_left_and_the_next_call_resumes(
        python_search):
    _, report = python_search
    interrupted = report["interrupted"]
    assert interrupted is not None, "the interrupt did not reach run_search's caller"
    assert interrupted["workers"] == []  # every worker process is gone
    assert interrupted["counts"]["running"] == 0
    assert sum(interrupted["counts"][s] for s in ("done", "failed")) == 3
    assert sum(r["status"] == "done" for r in report["done"]["rows"]) >= 3


def test_an_interrupt_is_one_line_without_the_librarys_frames_and_a_resume_says_so(
        python_search):
    interrupted = python_search[1]["interrupted"]
    assert interrupted["type"] == "SearchInterrupted"
    assert interrupted["message"] == ("interrupted: 3 of 4 candidates done, the running ones "
                                      "went back to pending; call run_search again to resume")
    package = os.path.dirname(os.path.abspath(nas.__file__)) + os.sep  # wherever it is cloned
    inside = [f for f in interrupted["frames"] if f.startswith(package)]
    assert inside == [f for f in inside if f.endswith("api.py:run_search")], inside
    assert len(inside) <= 1 and not interrupted["context"]
    assert python_search[1]["resumed_output"].splitlines() == ["resuming: 3 done, 1 to go"]


def test_a_finished_search_called_again_trains_nothing(python_search):
    _, report = python_search
    assert report["again"]["rows"] == report["done"]["rows"]  # no new row, none retrained
    assert report["again"]["recommended"] == report["done"]["recommended"]


def test_resuming_with_another_loss_is_one_line(python_search, tmp_path, monkeypatch):
    workdir, _ = python_search
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    before = Study.load(workdir).counts()
    x = jnp.zeros((1, 8, 8, 3))
    model = flow.Net()
    seed = nas.from_flax(model, x, variables=model.init(jax.random.PRNGKey(0), x))
    with pytest.raises(ValueError, match=r"train\.loss: the study in .* was run with "
                                         r"__main__:offset_loss"):
        nas.run_search(seed, flow.digits(), workdir=workdir, max_candidates=4,
                       loss=offset_loss, costs={"kilo_params": flow.kilo_params},
                       overrides=flow.OVERRIDES, progress=False)
    assert Study.load(workdir).counts() == before


def test_resuming_from_another_model_is_one_line(python_search, tiny_seed, tmp_path,
                                                 monkeypatch):
    workdir, _ = python_search
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    before = Study.load(workdir).counts()
    with pytest.raises(ValueError, match=r"seed: the study in .* started from another model"):
        nas.run_search(tiny_seed, flow.digits(), workdir=workdir, max_candidates=4,
                       loss=flow.offset_loss, overrides=flow.OVERRIDES, progress=False)
    assert Study.load(workdir).counts() == before


def test_an_external_worker_cannot_train_a_study_whose_loss_lives_in_a_notebook(
        python_search):
    """The loss reached the driver's workers by value; `nas-search worker` has only its name,
    `__main__:offset_loss`, which it cannot import: one line at start, nothing claimed."""
    workdir, _ = python_search
    run = subprocess.run([sys.executable, "-m", "nas.search.cli", "worker",
                          f"--workdir={workdir}", "--wait_s=0"], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, PYTHONPATH=ROOT))
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1, run.stderr[-2000:]
    assert "cannot import '__main__:offset_loss'" in lines[0] and "nas.run_search" in lines[0]


@pytest.mark.slow  # two searches in two processes; the flow above covers the Python door
def test_the_python_call_and_the_command_give_the_same_candidates(tmp_path, monkeypatch):
    """Equivalent configs: the digits search file, the same overrides, the same loss (by
    value in Python, by name on the command line)."""
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    overrides = {"train.total_epochs": 0.25, "search.seed_epochs": 0.25,
                 "search.seed_max_epochs": 0.0, "search.min_child_steps": 0,
                 "train.ckpt_steps": 0, "search.executor": "inline",
                 "search.selection.min_acc": 0.0, "search.finals.k": 0,
                 "search.fit": {"steps": 2, "batches": 1, "batch_size": 8,
                                "bn_batch_size": 16}}
    config = os.path.join(ROOT, "configs", "digits_cnn_search.py")
    result = nas.run_search("cnn", "digits", workdir=tmp_path / "python", max_candidates=3,
                            config=config, overrides=overrides, loss=offset_loss,
                            progress=False)
    flags = [f"--config.{k}={v}" for k, v in overrides.items() if k != "search.fit"]
    flags += [f"--config.search.fit.{k}={v}" for k, v in overrides["search.fit"].items()]
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run(
        [sys.executable, "-m", "nas.search.cli", f"--config={config}",
         f"--workdir={tmp_path / 'command'}", "--config.search.max_candidates=3",
         "--config.train.loss=tests.search._user_functions:offset_loss", "--noprogress",
         *flags], env=env, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    command = Study.load(tmp_path / "command")
    assert [c.fingerprint for c in result.candidates()] == \
        [c.fingerprint for c in command.candidates()]
    assert [c.status for c in command.candidates()] == ["done"] * 3
    assert all(c.loss > 100.0 for c in command.candidates())  # the named loss trained it
    opened = nas.SearchResult.load(tmp_path / "command")  # a study of the command line's
    assert opened.recommended.info["id"] == result.recommended.info["id"]
    assert opened.summary().splitlines()[-2] == result.summary().splitlines()[-2].replace(
        str(tmp_path / "python"), str(tmp_path / "command"))


# ----------------------------------------------------------------------------- mistakes


class Tiny(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


@pytest.fixture(scope="module")
def tiny_seed():
    x = jnp.zeros((1, 8, 8, 3))
    return nas.from_flax(Tiny(), x, variables=Tiny().init(jax.random.PRNGKey(0), x))


def arrays(n=40, classes=10, shape=(8, 8, 3)):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    y = np.arange(n) % classes
    return x, y, x[:10], y[:10]


def _unshippable_loss():
    import threading

    lock = threading.Lock()  # a lock cannot travel to another process

    def loss(logits, labels):
        with lock:
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    return loss


MISTAKES = {
    "lengths": (dict(data=(arrays()[0], arrays()[1][:-1], *arrays()[2:])),
                r"data: x_train holds 40 images but y_train 39 labels"),
    "dtype": (dict(data=(arrays()[0].astype(np.float32), *arrays()[1:])),
              r"data: x_train has dtype float32, expected uint8"),
    "dims": (dict(data=(arrays()[0][..., 0, 0], *arrays()[1:])),
             r"data: x_train has shape \(40, 8\), expected \(N, H, W\) or \(N, H, W, C\)"),
    "labels outside": (dict(data=(arrays()[0], arrays()[1] + 5, *arrays()[2:])),
                       r"data: labels go up to 14, outside \[0, 10\) of the seed's 10 outputs"),
    "label count": (dict(data=arrays(classes=3)),
                    r"data: the labels name 3 classes but the seed has 10 outputs"),
    "negative label": (dict(data=(arrays()[0], arrays()[1] - 1, *arrays()[2:])),
                       r"data: y_train has label -1"),
    "loss fails": (dict(loss=lambda logits, labels: logits @ labels),
                   r"loss: .* fails to trace on logits \(2, 10\) float32"),
    "loss not scalar": (dict(loss=lambda logits, labels: logits.mean(axis=-1)),
                        r"loss: .* returned shape \(2,\), expected a scalar"),
    "unshippable": (dict(loss=_unshippable_loss()),
                    r"loss: .* cannot be shipped to worker processes"),
    "augment shape": (dict(augment=lambda key, images: images[:, :4]),
                      r"augment: .* returned shape \(2, 4, 8, 3\), expected the images' "
                      r"\(2, 8, 8, 3\)"),
    "optimizer": (dict(optimizer=lambda schedule: 3),
                  r"optimizer: expected optimizer\(learning_rate_schedule\) to return an "
                  r"optax.GradientTransformation, got int"),
    "override key": (dict(overrides={"train.totl_epochs": 1.0}),
                     r"overrides: unknown key 'train.totl_epochs'"),
    "override type": (dict(overrides={"train.total_epochs": "one"}),
                      r"overrides: train.total_epochs: expected float, got str"),
    "cost not callable": (dict(costs={"latency": 3.0}),
                          r"costs\['latency'\]: expected a function"),
    "settings": (dict(overrides={"search.time_limit_s": 10.0, "search.hard_time_limit_s": 5.0}),
                 r"config field 'search.hard_time_limit_s' must be >= search.time_limit_s"),
    "seed": (dict(seed="no-such-model"), r"seed: expected a candidate"),
    "max_candidates": (dict(max_candidates=0), r"max_candidates: expected an integer >= 1"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_is_one_line_naming_the_argument_and_writes_no_workdir(
        mistake, tiny_seed, tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    given, message = MISTAKES[mistake]
    kwargs = dict(seed=tiny_seed, data=arrays(), max_candidates=2, progress=False)
    kwargs.update(given)
    workdir = tmp_path / "study"
    with pytest.raises(ValueError, match=message) as raised:
        nas.run_search(workdir=workdir, **kwargs)
    assert "\n" not in str(raised.value)
    assert not workdir.exists()


class Grey(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Conv(4, (3, 3))(x)).mean(axis=(1, 2)))


def test_a_model_of_grey_images_trains_on_them_at_its_own_input_shape(tmp_path, monkeypatch):
    """The seed's input shape decides the images' size and channels: (8, 8, 1) here, from
    (N, 8, 8) arrays; its exported file keeps that shape and runs on it."""
    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    x = jnp.zeros((1, 8, 8, 1))
    seed = nas.from_flax(Grey(), x, variables=Grey().init(jax.random.PRNGKey(0), x))
    grey = arrays(n=80, shape=(8, 8))
    result = nas.run_search(seed, grey, workdir=tmp_path / "study", max_candidates=1,
                            overrides={"train.total_epochs": 0.5, "search.seed_epochs": 0.5,
                                       "search.seed_max_epochs": 0.0, "search.min_child_steps": 0,
                                       "search.executor": "inline", "train.ckpt_steps": 0,
                                       "train.input.batch_size": 16, "search.finals.k": 0},
                            progress=False)
    train = result.study.config["train"]
    assert (train["input"]["image_size"], train["input"]["channels"]) == (8, 1)
    assert [c.status for c in result.candidates()] == ["done"]
    candidate = result.recommended
    assert tuple(candidate.input_shape) == (8, 8, 1)
    assert np.shape(candidate(np.zeros((2, 8, 8, 1), np.float32))) == (2, 10)


def test_a_seed_whose_images_are_not_square_or_have_2_channels_is_one_line(tmp_path):
    x = jnp.zeros((1, 8, 8, 2))
    seed = nas.from_flax(Tiny(), x, variables=Tiny().init(jax.random.PRNGKey(0), x))
    with pytest.raises(ValueError, match=r"seed: input shape \(8, 8, 2\): nas trains square "
                                         r"images with 1 or 3 channels"):
        nas.run_search(seed, arrays(), workdir=tmp_path / "s", max_candidates=2)
    assert not (tmp_path / "s").exists()
