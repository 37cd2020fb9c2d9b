"""Run in a subprocess with 2 forced CPU devices: a step on a 2-device mesh vs a 1-device
mesh, on the same global batch.

Prints one JSON line with the largest differences of gradients, new params and loss.
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
from helpers import tiny_graph  # noqa: E402

from nas.graph import Model  # noqa: E402
from nas.train import mesh as mesh_lib  # noqa: E402
from nas.train import optim, steps  # noqa: E402
from nas.train.config import base_config  # noqa: E402


def main() -> None:
    assert jax.local_device_count() == 2, jax.devices()
    graph, constants = tiny_graph()
    model = Model(graph, constants)
    rng = np.random.default_rng(0)
    batch = {"image": rng.normal(size=(16, 32, 32, 3)).astype(np.float32),
             "label": rng.integers(0, 10, 16).astype(np.int32)}
    variables = model.init(jax.random.PRNGKey(0), batch["image"][:1])
    params = jax.tree.map(np.asarray, dict(variables["params"]))
    c = base_config()
    c.optax_name, c.lr, c.wd = "identity", 0.1, 1e-3  # plain SGD: updates are 0.1 * grads
    c.schedule = {"decay_type": "constant"}
    tx, _ = optim.make(c, params, dict(total_steps=10))
    state = {"params": params, "frozen": {}, "batch_stats": {},
             "opt_state": jax.tree.map(np.asarray, tx.init(params)), "ema": {},
             "step": np.int32(0)}
    fn = steps.make_train_step(model, tx, 10, return_grads=True)
    key = np.asarray(jax.random.PRNGKey(1))
    out = {}
    for n in (1, 2):
        mesh = mesh_lib.build((n,))
        step = steps.train_program(fn, mesh)
        new, m = step(mesh_lib.put_replicated(state, mesh), mesh_lib.put_sharded(batch, mesh),
                      mesh_lib.put_replicated(key, mesh))
        if n == 2:  # both devices hold identical params
            p0, p1 = ([np.asarray(x.addressable_shards[i].data)
                       for x in jax.tree.leaves(new["params"])] for i in (0, 1))
            out["replica_diff"] = max(float(np.abs(a - b).max())
                                      for a, b in zip(p0, p1, strict=True))
        out[n] = (mesh_lib.to_host(new), mesh_lib.to_host(m))

    def maxdiff(a, b):
        return max(float(np.abs(x - y).max()) for x, y in
                   zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))

    print(json.dumps({
        "grad_diff": maxdiff(out[1][1]["grads"], out[2][1]["grads"]),
        "grad_scale": max(float(np.abs(x).max()) for x in jax.tree.leaves(out[1][1]["grads"])),
        "grad_ratio": float(optim.optax.tree.norm(out[2][1]["grads"])
                            / optim.optax.tree.norm(out[1][1]["grads"])),
        "param_diff": maxdiff(out[1][0]["params"], out[2][0]["params"]),
        "loss_diff": abs(float(out[1][1]["training_loss"]) - float(out[2][1]["training_loss"])),
        "replica_diff": out["replica_diff"],
    }))


if __name__ == "__main__":
    main()
