"""The reversible trainer against plain jax.grad + optax on the same network."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nas.graph import Model
from nas.train import config as config_lib
from nas.train import optim, steps
from nas.train.checkpoint import Checkpointer
from nas.train.reversible import ReversibleTrainer
from nas.zoo import revnet

SCHED = {"decay_type": "stair", "boundaries": [0.5], "mults": [0.1]}  # lr drops at step 2
SCHED_KW = {"total_steps": 3, "steps_per_epoch": 1.0}
IMAGE = (16, 16, 3)


def _config(optax_name: str, **kw) -> config_lib.ml_collections.ConfigDict:
    return config_lib.with_defaults({"optax_name": optax_name, "lr": 0.05, "num_classes": 10,
                                     "grad_clip_norm": 0.0, "schedule": SCHED, **kw})


def _batches(n: int, batch: int = 4) -> list[dict[str, np.ndarray]]:
    rs = np.random.RandomState(0)
    return [{"image": rs.randn(batch, *IMAGE).astype(np.float32),
             "label": rs.randint(0, 10, batch).astype(np.int32)} for _ in range(n)]


@pytest.fixture(autouse=True)
def _full_f32_matmuls():
    """Equality with the plain whole-model step is a statement about the math, so both sides
    run full-f32 matmuls: an accelerator's default (TF32 on GPUs) rounds ~1e-4 differently in
    two differently fused programs, and Adam amplifies that. (Couplings use `highest` anyway.)
    """
    with jax.default_matmul_precision("highest"):
        yield


def _plain_steps(graph, constants, config, params, batches):
    """The reference: whole-model jax.grad and the full-model optax optimizer."""
    model = Model(graph, constants)
    tx, _ = optim.make(config, params, SCHED_KW)
    opt = tx.init(params)

    @jax.jit
    def step(p, opt, batch):
        def loss_fn(p):
            logits = model.apply({"params": p}, batch["image"])
            return jnp.mean(steps.softmax_xent(logits, jax.nn.one_hot(batch["label"], 10)))

        grads = jax.grad(loss_fn)(p)
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt

    for batch in batches:
        params, opt = step(params, opt, batch)
    return jax.tree.map(np.asarray, params)


def _init(graph, constants):
    model = Model(graph, constants)
    variables = model.init(jax.random.PRNGKey(0), np.zeros((1, *IMAGE), np.float32))
    return jax.tree.map(np.asarray, dict(variables["params"]))


def _max_diff(a, b) -> float:
    diffs = jax.tree.map(lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))),
                         a, b)
    return max(jax.tree.leaves(diffs))


@pytest.mark.parametrize("optax_name,extra", [("identity", {}),
                                              ("scale_by_adam", {"wd": 1e-2})])
def test_three_steps_equal_standard(optax_name, extra):
    graph, constants, _ = revnet.RevNet(depth=3, width=8)
    config = _config(optax_name, **extra)
    params = _init(graph, constants)
    batches = _batches(3)
    trainer = ReversibleTrainer(graph, constants, config=config, sched_kw=SCHED_KW,
                                image_shape=IMAGE, params=params)
    for batch in batches:
        trainer.train_step(batch, jax.random.PRNGKey(1))
    want = _plain_steps(graph, constants, config, params, batches)
    got = trainer.full_params
    assert set(got) == set(want)
    assert _max_diff(got, want) < 1e-5
    assert _max_diff(got, params) > 1e-3  # it did train


@pytest.mark.slow
def test_transformer_matches_standard():
    graph, constants, _ = revnet.RevTransformer(depth=2, width=16, num_heads=2, patch_size=4,
                                                image_size=16)
    # SGD: the key bias has an exactly-zero gradient (softmax ignores a per-query shift),
    # whose float noise Adam would blow up to lr-sized steps in either trainer.
    config = _config("identity", lr=0.01)
    params = _init(graph, constants)
    batches = _batches(2)
    trainer = ReversibleTrainer(graph, constants, config=config, sched_kw=SCHED_KW,
                                image_shape=IMAGE, params=params)
    for batch in batches:
        trainer.train_step(batch, jax.random.PRNGKey(1))
    assert _max_diff(trainer.full_params,
                     _plain_steps(graph, constants, config, params, batches)) < 1e-5


def test_reconstructed_inputs_equal_forward_ones():
    graph, constants, _ = revnet.RevNet(depth=4, width=8)
    trainer = ReversibleTrainer(graph, constants, config=_config("identity"),
                                sched_kw=SCHED_KW, image_shape=IMAGE)
    trainer.train_step(_batches(1)[0], jax.random.PRNGKey(0))  # non-trivial weights
    acts = trainer.activations(_batches(1)[0]["image"])
    couplings = [layer.index for layer in trainer.layers if layer.kind == "coupling"]
    assert len(couplings) == 4
    for i in couplings:
        rebuilt = trainer.reconstruct(i, acts[i + 1])
        for x, r in zip(acts[i], rebuilt, strict=True):
            np.testing.assert_allclose(r, x, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="is not a coupling"):
        trainer.reconstruct(0, acts[1])
    with pytest.raises(ValueError, match="layer 99: this network has"):
        trainer.reconstruct(99, acts[1])
    plain = Model(graph, constants).apply({"params": trainer.full_params},
                                          _batches(1)[0]["image"])
    np.testing.assert_allclose(trainer.predict(_batches(1)[0]["image"]), plain, atol=1e-5)


def test_defaults_and_layer_by_layer_init():
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    trainer = ReversibleTrainer(graph, constants, config=_config("identity"),
                                sched_kw=SCHED_KW, image_shape=IMAGE)
    plain = _init(graph, constants)
    got = trainer.full_params
    assert jax.tree.map(np.shape, got) == jax.tree.map(np.shape, plain)
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves(trainer.host)}
    assert kinds <= {"pinned_host", "unpinned_host"}
    assert all(len(bufs) == 1 for bufs in trainer.host)  # one packed buffer per layer


def test_checkpoint_restores_and_continues(tmp_path):
    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    config = _config("scale_by_adam")
    batches = _batches(3)

    def fresh():
        return ReversibleTrainer(graph, constants, config=config, sched_kw=SCHED_KW,
                                 image_shape=IMAGE, seed=3)

    a = fresh()
    for batch in batches[:2]:
        a.train_step(batch, jax.random.PRNGKey(1))
    ckpt = Checkpointer(str(tmp_path), async_save=False)
    ckpt.save(a.step, a.state(), {"note": "rev"}, force=True)
    ckpt.wait()
    a.train_step(batches[2], jax.random.PRNGKey(1))

    b = fresh()
    state, meta = ckpt.restore(b.state())
    ckpt.close()
    b.load_state(state)
    assert b.step == 2 and meta["note"] == "rev"
    b.train_step(batches[2], jax.random.PRNGKey(1))
    assert _max_diff(a.full_params, b.full_params) == 0.0
    assert _max_diff(a.opt_state, b.opt_state) == 0.0


def test_rejects_unmarked_graph_and_batchnorm():
    from nas.zoo import cnn

    graph, constants, _ = cnn.CifarNet()
    with pytest.raises(ValueError, match="not marked reversible"):
        ReversibleTrainer(graph, constants, config=_config("identity"), sched_kw=SCHED_KW)


_DP_SCRIPT = """
import os
# the suite's XLA flags (tests/conftest.py: the cheapest codegen) are kept
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                  "--xla_force_host_platform_device_count=2"]))
import jax, numpy as np
from nas.train import config as config_lib
from nas.train.reversible import ReversibleTrainer
from nas.zoo import revnet
assert jax.local_device_count() == 2
graph, constants, _ = revnet.RevNet(depth=2, width=8)
config = config_lib.with_defaults({"optax_name": "identity", "lr": 0.05,
                                   "grad_clip_norm": 0.0, "num_classes": 10})
rs = np.random.RandomState(0)
batches = [{"image": rs.randn(4, 16, 16, 3).astype(np.float32),
            "label": rs.randint(0, 10, 4).astype(np.int32)} for _ in range(2)]
out = []
for devices in (jax.local_devices(), jax.local_devices()[:1]):
    t = ReversibleTrainer(graph, constants, config=config, image_shape=(16, 16, 3),
                          sched_kw={"total_steps": 2}, devices=devices, seed=0)
    losses = [t.train_step(b, jax.random.PRNGKey(0))["training_loss"] for b in batches]
    out.append((t.full_params, losses))
diff = max(float(np.max(np.abs(out[0][0][k][n] - out[1][0][k][n])))
           for k in out[0][0] for n in out[0][0][k])
print("DIFF", diff, out[0][1], out[1][1])
assert diff < 1e-5, diff
assert abs(out[0][1][0] - out[1][1][0]) < 1e-5
"""


@pytest.mark.slow  # a subprocess compiling both trainers; data parallelism is in the default
def test_two_devices_equal_one_device():
    env = dict(os.environ, JAX_PLATFORMS="cpu")  # the forced devices are CPU devices
    proc = subprocess.run([sys.executable, "-c", _DP_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
