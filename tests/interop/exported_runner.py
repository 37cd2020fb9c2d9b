"""Runs code written by `nas.export_flax` the way a user without `nas` would, and measures a
linen model the same way for the IR interpreter (the tests import `measure` from here).

Run as `python -I -B exported_runner.py ROOT [linen|nnx]` (`run_without_nas` does): every
ROOT/<name>/code/ holds an export (model.py, variables.msgpack) and ROOT/<name>/inputs.npz a
batch and its labels; the results go to ROOT/<name>/result.npz. A linen export is measured
by `run_linen`, an NNX one (`api="nnx"`) by `run_nnx`. An import hook makes `import nas`
fail first, so the exported code can only run on jax, flax, optax and numpy. This file
itself imports nothing of `nas`.
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


def _by_op(module: Any, state: Any) -> dict[str, Any]:
    """A flat NNX state keyed `op/leaf` (the op name from the file's OP_ATTRIBUTES), its
    values copied now (a state holds the model's live variables)."""
    import numpy as np
    from flax import nnx

    ops = {attr: op for op, attr in module.OP_ATTRIBUTES.items()}
    return {"/".join([ops[path[0]], *map(str, path[1:])]): np.array(value[...])
            for path, value in nnx.to_flat_state(state)}


def run_nnx(module: Any, variables: dict[str, Any], inputs: Any) -> dict[str, Any]:
    """An NNX export as an NNX user runs it: `from_variables`, inference, `nnx.grad`,
    training mode and three `nnx.Optimizer` steps; gradients and batch statistics keyed
    by op name as in variables.msgpack."""
    import jax
    import numpy as np
    import optax
    from flax import nnx

    batch, labels = inputs["batch"], inputs["labels"]

    def loss_fn(model: Any) -> Any:
        log_p = jax.nn.log_softmax(model(batch))
        return -jax.numpy.mean(jax.numpy.take_along_axis(log_p, labels[:, None], axis=1))

    model = module.from_variables(variables)
    out: dict[str, Any] = {"is_nnx": isinstance(model, nnx.Module), "logits": model(batch)}
    # eval mode: no randomness. Jitted as `measure` does for linen: eagerly, each op of the
    # backward pass compiles on its own, several times the cost of one program
    loss, grads = nnx.jit(nnx.value_and_grad(loss_fn))(model)
    out["loss"] = loss
    out |= {f"grad:{k}": v for k, v in _by_op(module, nnx.state(grads, nnx.Param)).items()}
    # Training mode with dropout and stochastic depth held off, so that the batch statistics
    # and the logits are comparable with the interpreter's; then the optimizer steps with
    # them on, as a user trains.
    model.train()
    model.set_attributes(deterministic=True, raise_if_not_found=False)
    out["train_logits"] = model(batch)
    out |= {f"stats:{k}": v for k, v in _by_op(module, nnx.state(model, nnx.BatchStat)).items()}
    out["train_loss"] = loss_fn(model)
    model.set_attributes(deterministic=False, raise_if_not_found=False)
    optimizer = nnx.Optimizer(model, optax.sgd(0.05), wrt=nnx.Param)

    @nnx.jit
    def step(model: Any, optimizer: Any) -> Any:
        value, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return value

    for _ in range(3):
        step(model, optimizer)
    model.set_attributes(deterministic=True, raise_if_not_found=False)
    out["train_loss_after"] = loss_fn(model)
    return {k: np.asarray(v) for k, v in out.items()}


def run_linen(module: Any, variables: dict[str, Any], inputs: Any) -> dict[str, Any]:
    """A linen export's `Model().apply`, measured by `measure`."""
    import jax

    def apply(v: Any, x: Any, train: bool, **kw: Any) -> Any:
        return module.Model().apply(v, x, train=train, **kw)

    return measure(apply, variables, inputs["batch"], inputs["labels"],
                   jax.random.PRNGKey(int(inputs["seed"])), bool(inputs["grads"]))


RUNNERS = {"linen": run_linen, "nnx": run_nnx}


def main(root: str, api: str = "linen") -> None:
    run = RUNNERS[api]
    sys.meta_path.insert(0, NoNas())
    try:
        import nas  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("nas is importable: the test would not show anything")
    import flax.serialization
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
        result = run(module, variables, np.load(os.path.join(folder, "inputs.npz")))
        np.savez(os.path.join(folder, "result.npz"), **result)
    loaded = sorted(m for m in sys.modules if m == "nas" or m.startswith("nas."))
    if loaded:
        raise SystemExit(f"nas modules were loaded: {loaded}")
    print("ran without nas")


def run_without_nas(root: Any, api: str = "linen") -> None:
    """Copies this file into `root` and runs it there on every export in one `python -I -B`
    subprocess (no site, no PYTHONPATH, no bytecode written beside model.py)."""
    import shutil
    import subprocess

    shutil.copy(os.path.abspath(__file__), root)
    command = [sys.executable, "-I", "-B", os.path.basename(__file__), str(root), api]
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "ran without nas" in proc.stdout, proc.stderr[-3000:]


if __name__ == "__main__":
    main(*sys.argv[1:])
