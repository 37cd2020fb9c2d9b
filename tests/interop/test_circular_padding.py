"""A Conv with circular padding imports exactly (the IR's CONV takes flax's padding string,
"CIRCULAR" included) and exports as the same Flax code; only a circular ConvTranspose, which
has no IR op, is refused (`test_import_layers`)."""

from __future__ import annotations

import importlib.util
import os

import flax.linen as nn
import flax.serialization
import jax
import numpy as np
import pytest
from flax import nnx

import nas


class LinenCircular(nn.Module):
    padding: str = "CIRCULAR"

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3), padding=self.padding)(x))
        x = nn.Conv(8, (3, 3), padding=self.padding, feature_group_count=4, kernel_dilation=2,
                    strides=2)(x)
        return nn.Dense(3)(x.mean(axis=(1, 2)))


class NnxCircular(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 6, (3, 3), padding="CIRCULAR", strides=2, rngs=rngs)
        self.head = nnx.Linear(6, 2, rngs=rngs)

    def __call__(self, x):
        return self.head(nnx.relu(self.conv(x)).mean(axis=(1, 2)))


X = jax.random.normal(jax.random.PRNGKey(1), (2, 9, 9, 3))  # odd size: the wrap shows


def _paddings(candidate) -> list:
    return [op.op_kwargs.get("padding") for op in candidate.graph.ops
            if op.type.name == "CONV"]


@pytest.mark.parametrize("kind", ["linen", "nnx"])
def test_a_circular_conv_imports_exactly(kind):
    if kind == "linen":
        model = LinenCircular()
        variables = model.init(jax.random.PRNGKey(0), X)
        candidate = nas.from_flax(model, X, variables=variables)
        expected = model.apply(variables, X)
        assert nas.check_import(candidate, model, X, variables=variables) <= 1e-6
    else:
        model = NnxCircular(nnx.Rngs(0))
        candidate = nas.from_flax(model, X)
        expected = model(X)
        assert nas.check_import(candidate, model, X) <= 1e-6
    assert set(_paddings(candidate)) == {"CIRCULAR"}
    np.testing.assert_allclose(np.asarray(candidate(X)), np.asarray(expected), rtol=1e-5,
                               atol=1e-5)
    if kind == "linen":  # zero padding gives other logits: the comparison sees the wrap
        same = LinenCircular(padding="SAME").apply(variables, X)
        assert np.abs(np.asarray(same) - np.asarray(candidate(X))).max() > 1e-3


def test_a_circular_conv_exports_as_the_same_flax_code(tmp_path):
    model = LinenCircular()
    variables = model.init(jax.random.PRNGKey(0), X)
    candidate = nas.from_flax(model, X, variables=variables)
    nas.export_flax(candidate, str(tmp_path / "out"))
    source = (tmp_path / "out" / "model.py").read_text()
    assert source.count("padding='CIRCULAR'") + source.count('padding="CIRCULAR"') == 2
    spec = importlib.util.spec_from_file_location("circular_export",
                                                  os.path.join(tmp_path, "out", "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    restored = flax.serialization.msgpack_restore(
        (tmp_path / "out" / "variables.msgpack").read_bytes())
    np.testing.assert_allclose(np.asarray(module.Model().apply(restored, X)),
                               np.asarray(model.apply(variables, X)), rtol=1e-5, atol=1e-5)
