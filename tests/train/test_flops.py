"""FLOPs from the jaxpr: equal to XLA:CPU's count, and independent of the default backend."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nas import zoo
from nas.graph import Model
from nas.train import flops, perf


def _apply(model):
    return lambda v, x: model.apply(v, x, deterministic=True, training=False)


def _zoo(name: str, size: int):
    graph, constants, _ = zoo.build(name, 10, size)
    model = Model(graph, constants)
    x = jax.ShapeDtypeStruct((1, size, size, 3), np.float32)
    variables = jax.eval_shape(
        lambda: model.init({"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(0)},
                           np.zeros(x.shape, x.dtype)))
    return model, variables, x


@pytest.mark.parametrize("name, size", [
    ("cnn", 32), ("resnet18", 32), ("b0", 32), ("ti/16", 224), ("revnet", 32)])
def test_zoo_counts_match_xla_cpu_within_one_percent(name, size):
    model, variables, x = _zoo(name, size)
    counted = flops.count(_apply(model), variables, x)
    reference = flops.xla_cpu_count(_apply(model), variables, x)
    assert abs(counted - reference) <= 0.01 * reference, (counted, reference)


def test_cifarnet_reads_75_6_mflops():
    model, variables, x = _zoo("cnn", 32)
    got = perf.flops_per_example(_apply(model), variables, (32, 32, 3))
    assert abs(got - 75_585_032) <= 0.01 * 75_585_032, got


def test_never_compiles_or_asks_the_default_backend(monkeypatch):
    """With every compile / cost-analysis entry point broken and the default backend
    claiming to be a GPU, the count is unchanged: it comes from shapes alone."""
    model, variables, x = _zoo("cnn", 32)
    expected = flops.count(_apply(model), variables, x)

    def refuse(*args, **kwargs):
        raise AssertionError("flops_per_example must not compile or run cost analysis")

    for cls in (jax.stages.Lowered, jax.stages.Compiled):
        for attr in ("compile", "cost_analysis"):
            if hasattr(cls, attr):
                monkeypatch.setattr(cls, attr, refuse)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax.stages.Traced, "lower", refuse)
    assert perf.flops_per_example(_apply(model), variables, (32, 32, 3)) == expected


@pytest.mark.parametrize("padding, lhs_dil, groups", [
    ("SAME", 1, 1), ("VALID", 1, 1), (((2, 1), (0, 3)), 1, 1), (((1, 1), (2, 0)), 2, 1),
    ("SAME", 1, 4)])
def test_conv_rule_matches_xla_on_padding_dilation_and_groups(padding, lhs_dil, groups):
    def conv(x, k):
        return jax.lax.conv_general_dilated(
            x, k, (2, 1), padding, lhs_dilation=(lhs_dil, lhs_dil), rhs_dilation=(1, 2),
            dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)

    x = jax.ShapeDtypeStruct((2, 9, 7, 8), np.float32)
    k = jax.ShapeDtypeStruct((3, 3, 8 // groups, 12), np.float32)
    assert flops.count(conv, x, k) == flops.xla_cpu_count(conv, x, k)


def test_control_flow_and_reductions():
    def f(x):
        y = jax.lax.scan(lambda c, r: (c + r @ r.T, None), x @ x.T, x[None].repeat(3, 0))[0]
        return jax.lax.cond(True, jnp_sum, lambda a: a[0, 0], y)

    def jnp_sum(a):
        return a.sum()

    x = jax.ShapeDtypeStruct((4, 5), np.float32)
    mm, add, red = 2 * 4 * 4 * 5, 16, 15
    assert flops.count(f, x) == mm + 3 * (mm + add) + red
