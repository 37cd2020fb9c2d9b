"""Models written the way users write them, imported once per test module: GroupNorm with a
gate and a residual (linen), an NNX residual net with BatchNorm and a strided conv, and
the import tests' models (`tests.interop.models`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

import nas
from tests.interop import models


class Gated(nn.Module):
    """GroupNorm, a sigmoid gate on the same width and a residual add of the gated
    product, then a flatten-dense head."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.GroupNorm(num_groups=4)(nn.Conv(16, (3, 3))(x)))
        x = x + x * nn.sigmoid(nn.Conv(16, (1, 1))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        return nn.Dense(10)(nn.relu(nn.Dense(16)(x.reshape((x.shape[0], -1)))))


class Residual(nnx.Module):
    """BatchNorm, a two-conv residual block, a strided conv and a mean-pooled head."""

    def __init__(self, rngs: nnx.Rngs):
        self.stem = nnx.Conv(3, 8, (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.a = nnx.Conv(8, 8, (3, 3), rngs=rngs)
        self.b = nnx.Conv(8, 8, (3, 3), rngs=rngs)
        self.wide = nnx.Conv(8, 16, (3, 3), strides=(2, 2), rngs=rngs)
        self.head = nnx.Linear(16, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.stem(x)))
        x = nnx.relu(x + self.b(nnx.relu(self.a(x))))
        return self.head(jnp.mean(nnx.relu(self.wide(x)), axis=(1, 2)))


def importer() -> Callable[[str], Any]:
    """name -> its imported candidate, each imported (traced) once: "gated", "residual",
    or a name of `tests.interop.models.build`."""
    out: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in out:
            x = models.example()
            if name == "gated":
                variables = Gated().init(jax.random.PRNGKey(0), x)
                out[name] = nas.from_flax(Gated(), x, variables=variables)
            elif name == "residual":
                model = Residual(nnx.Rngs(0))
                model.eval()
                out[name] = nas.from_flax(model, x)
            else:
                model, variables, kwargs = models.build(name)
                out[name] = nas.from_flax(model, x, variables=variables, **kwargs)
        return out[name]
    return get
