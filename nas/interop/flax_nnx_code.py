"""The NNX face of an exported candidate: `model.py`'s `Model` as a `flax.nnx.Module`.

Why: a user who imported an NNX model (`nas.from_flax`) trains NNX code; handing back a
linen module would make them port it. The candidate's graph is written once, as the linen
module `LinenModel` (`nas.interop.flax_code`, one line per op, checked against the
interpreter), and `Model` holds it through `nnx.bridge.ToNNX`: its parameters and batch
statistics are NNX variables, `nnx.grad`, `nnx.Optimizer` and `nnx.jit` work on it, and its
logits are the linen module's, bit for bit. `from_variables(variables)` builds it with the
trained variables of `variables.msgpack`.
"""

from __future__ import annotations

API = ("linen", "nnx")

DOC = '''"""A candidate of a `nas` search as a `flax.nnx` module (nas.export_flax, api="nnx").

`Model` is an nnx.Module around `LinenModel`, whose `__call__` has one line per op of the
candidate's graph, named after it, with its output shape in a comment (B: the batch size).
The candidate was trained on inputs of shape (B, *INPUT_SHAPE), as `preprocess` makes them
of uint8 images. Its trained variables are in variables.msgpack beside this file:

    import flax.serialization
    with open("variables.msgpack", "rb") as f:
        model = from_variables(flax.serialization.msgpack_restore(f.read()))
    logits = model(preprocess(images))  # inference on uint8 images
    logits = model(batch, train=True)  # a training step\\'s forward pass (updates batch stats)
"""'''

SOURCE = '''class Model(nnx.Module):
    """The candidate as an NNX module: `LinenModel` inside `nnx.bridge.ToNNX`, its
    parameters (and batch statistics) NNX variables. `train=True` uses and updates batch
    statistics, and draws dropout from `rngs` (give `nnx.Rngs(0, dropout=1)` for a model
    with dropout). It expects float32 images (B, *INPUT_SHAPE) as `preprocess` makes them."""

    def __init__(self, *, rngs: nnx.Rngs | None = None) -> None:
        self.linen = nnx.bridge.ToNNX(LinenModel(), rngs=rngs or nnx.Rngs(0))
        nnx.bridge.lazy_init(self.linen, jnp.zeros((1, *INPUT_SHAPE), jnp.float32))

    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        if train:
            return self.linen(x, train=True, mutable=["batch_stats"])
        return self.linen(x, train=False)


def from_variables(variables: dict, *, rngs: nnx.Rngs | None = None) -> Model:
    """`Model` holding `variables` ({"params", "batch_stats"}: variables.msgpack's)."""
    model = Model(rngs=rngs)
    for collection in variables.values():
        for op, leaves in collection.items():
            layer = getattr(model.linen, op)
            for name, value in leaves.items():
                layer[name].set_value(jnp.asarray(value))
    return model'''


def check_api(api: str | None, default: str) -> str:
    """`api` ("linen" or "nnx"), or `default` for None; anything else is one line."""
    chosen = default if api is None else api
    if chosen not in API:
        raise ValueError(f"export_flax: api must be 'linen' or 'nnx', got {api!r}")
    return chosen
