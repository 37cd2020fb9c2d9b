"""Runs code written by `nas.export_flax` the way a user without `nas` would, and measures a
model the same way for the IR interpreter (the tests import `measure` from here).

Run as `python -I -B exported_runner.py ROOT`: every ROOT/<name>/code/ holds an export (model.py,
variables.msgpack) and ROOT/<name>/inputs.npz a batch and its labels; the results go to
ROOT/<name>/result.npz. An import hook makes `import nas` fail first, so the exported code
can only run on jax, flax and numpy. This file itself imports nothing of `nas`.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any


class NoNas(importlib.abc.MetaPathFinder):
    """`import nas` (or any `nas.*`) fails, even where the package is installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "nas" or name.startswith("nas."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")


def measure(apply: Callable[..., Any], variables: dict[str, Any], batch: Any, labels: Any,
            key: Any, grads: bool = False) -> dict[str, Any]:
    """Inference logits; and for one training forward pass (batch statistics, dropout,
    stochastic depth from `key`): logits, cross-entropy loss, new batch_stats and (with
    `grads`: compiling the backward pass costs seconds) the gradient of the loss, as flat
    numpy arrays keyed by their path. `apply(variables, batch, train, **apply_kwargs)`
    calls the model."""
    import jax
    import numpy as np

    out = {"logits": jax.jit(lambda v, x: apply(v, x, False))(variables, batch)}

    def loss_fn(params: Any) -> Any:
        logits, updates = apply({**variables, "params": params}, batch, True,
                                mutable=["batch_stats"], rngs={"dropout": key})
        log_p = jax.nn.log_softmax(logits)
        loss = -jax.numpy.mean(jax.numpy.take_along_axis(log_p, labels[:, None], axis=1))
        return loss, (logits, updates)

    if grads:
        (loss, (logits, updates)), gradient = jax.jit(
            jax.value_and_grad(loss_fn, has_aux=True))(variables["params"])
    else:
        (loss, (logits, updates)), gradient = jax.jit(loss_fn)(variables["params"]), {}
    out["loss"], out["train_logits"] = loss, logits
    tree = {"batch_stats": dict(updates).get("batch_stats", {}), "grads": gradient}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        out[jax.tree_util.keystr(path)] = leaf
    return {k: np.asarray(v) for k, v in out.items()}


def main(root: str) -> None:
    sys.meta_path.insert(0, NoNas())
    try:
        import nas  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("nas is importable: the test would not show anything")
    import flax.serialization
    import jax
    import numpy as np

    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(os.path.join(folder, "code")):
            continue
        spec = importlib.util.spec_from_file_location(f"exported_{name}",
                                                      os.path.join(folder, "code", "model.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with open(os.path.join(folder, "code", "variables.msgpack"), "rb") as f:
            variables = flax.serialization.msgpack_restore(f.read())
        inputs = np.load(os.path.join(folder, "inputs.npz"))

        def apply(v: Any, x: Any, train: bool, module: Any = module, **kw: Any) -> Any:
            return module.Model().apply(v, x, train=train, **kw)

        result = measure(apply, variables, inputs["batch"], inputs["labels"],
                         jax.random.PRNGKey(int(inputs["seed"])), bool(inputs["grads"]))
        np.savez(os.path.join(folder, "result.npz"), **result)
    loaded = sorted(m for m in sys.modules if m == "nas" or m.startswith("nas."))
    if loaded:
        raise SystemExit(f"nas modules were loaded: {loaded}")
    print("ran without nas")


if __name__ == "__main__":
    main(sys.argv[1])
