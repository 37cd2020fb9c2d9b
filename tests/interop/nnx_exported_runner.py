"""Runs NNX code written by `nas.export_flax(..., api="nnx")` as an NNX user without `nas`
would: `from_variables`, inference, `nnx.grad`, training mode and `nnx.Optimizer` steps.

Run as `python -I -B nnx_exported_runner.py ROOT` beside `exported_runner.py` (its import
hook makes `import nas` fail): every ROOT/<name>/code/ holds an export and
ROOT/<name>/inputs.npz a batch and its labels; the results go to ROOT/<name>/result.npz,
gradients and batch statistics keyed by op name as in variables.msgpack.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any


def _by_op(module: Any, state: Any) -> dict[str, Any]:
    """A flat NNX state keyed `op/leaf` (the op name from the file's OP_ATTRIBUTES), its
    values copied now (a state holds the model's live variables)."""
    import numpy as np
    from flax import nnx

    ops = {attr: op for op, attr in module.OP_ATTRIBUTES.items()}
    return {"/".join([ops[path[0]], *map(str, path[1:])]): np.array(value[...])
            for path, value in nnx.to_flat_state(state)}


def run(module: Any, variables: dict[str, Any], batch: Any, labels: Any) -> dict[str, Any]:
    import jax
    import numpy as np
    import optax
    from flax import nnx

    def loss_fn(model: Any) -> Any:
        log_p = jax.nn.log_softmax(model(batch))
        return -jax.numpy.mean(jax.numpy.take_along_axis(log_p, labels[:, None], axis=1))

    model = module.from_variables(variables)
    out: dict[str, Any] = {"is_nnx": isinstance(model, nnx.Module), "logits": model(batch)}
    loss, grads = nnx.value_and_grad(loss_fn)(model)  # eval mode: no randomness
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


def main(root: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    from exported_runner import NoNas

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
        inputs = np.load(os.path.join(folder, "inputs.npz"))
        result = run(module, variables, inputs["batch"], inputs["labels"])
        np.savez(os.path.join(folder, "result.npz"), **result)
    assert not any(m == "nas" or m.startswith("nas.") for m in sys.modules)
    print("ran without nas")


if __name__ == "__main__":
    main(sys.argv[1])
