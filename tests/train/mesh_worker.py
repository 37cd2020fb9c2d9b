"""Run in a subprocess with 2 forced CPU devices: training on a 2-device mesh.

    python mesh_worker.py reversible   the reversible trainer, one step on a 2-device mesh
                                       and on a 1-device mesh, the same global batch
    python mesh_worker.py train DIR    `train_and_eval` of a tiny candidate on the 2-device
                                       mesh (device-resident data, then grain) and on a
                                       1-device mesh (`mesh_shape`), digits in tfds dir DIR

Prints one JSON line of results.
"""

import json
import os
import sys

# The suite's XLA flags, if any, are kept (tests/conftest.py: the cheapest codegen).
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                  "--xla_force_host_platform_device_count=2"]))
os.environ["JAX_PLATFORMS"] = "cpu"  # the forced devices exist only on the CPU platform
sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import numpy as np  # noqa: E402


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def reversible() -> dict:
    from nas.train import config as config_lib
    from nas.train import mesh as mesh_lib
    from nas.train.reversible import ReversibleTrainer
    from nas.zoo import revnet

    graph, constants, _ = revnet.RevNet(depth=2, width=8)
    # plain SGD: the update is lr times the gradient, so equal params are equal gradients
    config = config_lib.with_defaults({"optax_name": "identity", "lr": 0.05,
                                       "grad_clip_norm": 0.0, "num_classes": 10})
    rs = np.random.RandomState(0)
    batch = {"image": rs.randn(4, 16, 16, 3).astype(np.float32),
             "label": rs.randint(0, 10, 4).astype(np.int32)}
    out = {}
    with jax.default_matmul_precision("highest"):
        for n in (2, 1):
            mesh = mesh_lib.build((n,))
            t = ReversibleTrainer(graph, constants, config=config, image_shape=(16, 16, 3),
                                  sched_kw={"total_steps": 2}, mesh=mesh, seed=0)
            before = t.full_params
            loss = t.train_step(batch, jax.random.PRNGKey(0))["training_loss"]
            after = t.full_params
            step = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), after, before)
            out[n] = (step, loss, t.predict(batch["image"]), t.n)
    return {"devices": out[2][3], "update_diff": _max_diff(out[2][0], out[1][0]),
            "update_scale": max(float(np.max(np.abs(x))) for x in jax.tree.leaves(out[1][0])),
            "loss_diff": abs(out[2][1] - out[1][1]),
            "logits_diff": float(np.max(np.abs(out[2][2] - out[1][2])))}


def train(data_dir: str) -> dict:
    from helpers import tiny_config, tiny_graph

    from nas.io import examples
    from nas.train import TrainOptions, train_and_eval

    graph, constants = tiny_graph(with_bn=True)
    out = {}
    for name, overrides in (("mesh2_device_data", {}),
                            ("mesh2_grain", {"input.device_data_bytes": 0}),
                            ("mesh1", {"mesh_shape": (1,)})):
        config = tiny_config(data_dir, total_epochs=0.5, **overrides)
        m, _, state = train_and_eval(config, options=TrainOptions(graph=graph,
                                                                  constants=constants))
        out[name] = {"acc": m.acc, "loss": m.loss, "steps": m.steps,
                     "eval_examples": m.eval_examples,
                     # the per-example bits, gathered from both devices' rows, agree
                     # with the accuracy summed over devices
                     "bits_acc": float(np.mean(examples.from_text(m.eval_correct))),
                     "bits": len(examples.from_text(m.eval_correct)),
                     "rate": m.im_sec_core_train,
                     "finite": bool(all(np.isfinite(np.asarray(x)).all()
                                        for x in jax.tree.leaves(state)))}
    return out


if __name__ == "__main__":
    assert jax.local_device_count() == 2, jax.devices()
    mode = sys.argv[1]
    print(json.dumps(reversible() if mode == "reversible" else train(sys.argv[2])))
