"""The grouped convolution with a per-tap kernel gradient (and, on CPU, as dense convolutions
per group): the same values, gradients and FLOPs as lax's, and an IR model's gradient never
uses XLA's slow batch-grouped kernel gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, grouped_conv, new_graph, new_op
from nas.train import flops

CASES = [  # cin, cout, kernel, strides, groups, size, padding, dilation
    (8, 16, (3, 3), (1, 1), 4, 8, "SAME", (1, 1)),
    (8, 8, (5, 5), (2, 2), 8, 9, "SAME", (1, 1)),  # depthwise, odd size
    (6, 12, (3, 2), (2, 3), 3, 11, "VALID", (2, 1)),
    (4, 6, (4, 4), (3, 3), 2, 10, ((1, 2), (0, 1)), (1, 1)),
    (6, 4, (3,), (2,), 2, 12, "SAME", (1,)),  # one spatial dim
]


@pytest.mark.parametrize("cin,cout,kernel,strides,groups,size,padding,dilation", CASES)
def test_values_gradients_and_flops_equal_lax(cin, cout, kernel, strides, groups, size,
                                              padding, dilation):
    spatial = len(kernel)
    x = jax.random.normal(jax.random.PRNGKey(0), (3, *(size,) * spatial, cin))
    w = jax.random.normal(jax.random.PRNGKey(1), (*kernel, cin // groups, cout))
    numbers = grouped_conv.channels_last(x.ndim)

    def loss(conv):
        def f(x, w):
            y = conv(x, w, strides, padding, None, dilation, numbers, groups,
                     precision=jax.lax.Precision.HIGHEST)
            return jnp.sum(jnp.sin(y)), y
        return f

    (want, y_lax), g_lax = jax.value_and_grad(loss(jax.lax.conv_general_dilated), (0, 1),
                                              has_aux=True)(x, w)
    (got, y_ours), g_ours = jax.value_and_grad(loss(grouped_conv.conv_general_dilated),
                                               (0, 1), has_aux=True)(x, w)
    np.testing.assert_allclose(y_ours, y_lax, rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(g_ours, g_lax, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    count = [flops.count(lambda x, w, c=c: loss(c)(x, w)[1], x, w)
             for c in (jax.lax.conv_general_dilated, grouped_conv.conv_general_dilated)]
    assert count[0] == count[1] > 0


@pytest.mark.parametrize("cin,cout,kernel,strides,groups,size,padding,dilation", CASES[:4])
def test_both_backend_branches_equal_lax(cin, cout, kernel, strides, groups, size, padding,
                                         dilation):
    """The per-group branch (CPU) and the per-tap-gradient branch (other backends), each
    called directly, so that both are checked whatever the default backend is."""
    x = jax.random.normal(jax.random.PRNGKey(0), (3, size, size, cin))
    w = jax.random.normal(jax.random.PRNGKey(1), (*kernel, cin // groups, cout))
    numbers = grouped_conv.channels_last(4)
    if isinstance(padding, str):
        dilated = [(k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True)]
        padding = jax.lax.padtype_to_pads((size, size), dilated, strides, padding)
    pads = tuple(map(tuple, padding))
    highest = jax.lax.Precision.HIGHEST
    branches = {
        "lax": lambda x, w: jax.lax.conv_general_dilated(
            x, w, strides, pads, None, dilation, numbers, groups, precision=highest),
        "per_group": lambda x, w: grouped_conv._per_group(
            x, w, strides=strides, pads=pads, dilation=dilation, groups=groups,
            precision=highest),
        "per_tap": grouped_conv._grouped(strides, pads, dilation, groups, highest)}
    results = {name: jax.value_and_grad(lambda x, w, f=f: jnp.sum(jnp.sin(f(x, w))), (0, 1))(
        x, w) for name, f in branches.items()}
    (want, want_grads) = results.pop("lax")
    for got, grads in results.values():
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for ours, theirs in zip(grads, want_grads, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups, per_group", [(16, True), (32, False)])
def test_the_cpu_runs_up_to_16_groups_as_dense_convolutions(groups, per_group):
    x, w = jnp.ones((1, 6, 6, 32)), jnp.ones((3, 3, 32 // groups, 32))
    jaxpr = jax.make_jaxpr(lambda x, w: grouped_conv.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=grouped_conv.channels_last(4),
        feature_group_count=groups))(x, w)
    assert ("platform_index" in str(jaxpr)) == per_group


def test_grouped_convolution_of_flattened_features_is_a_grouped_matmul():
    """No spatial dims (a CONV on a FLATTEN's output): a batched matmul over the groups, with
    lax's values, gradients and FLOPs, and no convolution left for XLA's slow path."""
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 8))
    w = jax.random.normal(jax.random.PRNGKey(1), (2, 12))  # 4 groups: 2 in, 3 out each
    numbers = grouped_conv.channels_last(2)

    def loss(conv):
        def f(x, w):
            y = conv(x, w, (), "VALID", None, (), numbers, 4,
                     precision=jax.lax.Precision.HIGHEST)
            return jnp.sum(jnp.sin(y)), y
        return f

    (_, y_lax), g_lax = jax.value_and_grad(loss(jax.lax.conv_general_dilated), (0, 1),
                                           has_aux=True)(x, w)
    (_, y_ours), g_ours = jax.value_and_grad(loss(grouped_conv.conv_general_dilated), (0, 1),
                                             has_aux=True)(x, w)
    np.testing.assert_allclose(y_ours, y_lax, rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(g_ours, g_lax, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    count = [flops.count(lambda x, w, c=c: loss(c)(x, w)[1], x, w)
             for c in (jax.lax.conv_general_dilated, grouped_conv.conv_general_dilated)]
    assert count[0] == count[1] > 0
    jaxpr = jax.make_jaxpr(jax.grad(lambda x, w: loss(grouped_conv.conv_general_dilated)(
        x, w)[0], (0, 1)))(x, w)
    assert "conv_general_dilated" not in str(jaxpr)


def test_ungrouped_convolution_is_lax_unchanged():
    x, w = jnp.ones((1, 6, 6, 4)), jnp.ones((3, 3, 4, 5))
    jaxpr = jax.make_jaxpr(jax.grad(lambda w: grouped_conv.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=grouped_conv.channels_last(4)).sum()))(w)
    assert "custom_vjp" not in str(jaxpr)


def _primitive_params(jaxpr, name):
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(eqn.params)
        for value in eqn.params.values():
            for item in value if isinstance(value, tuple) else (value,):  # cond: branches
                inner = getattr(item, "jaxpr", item)
                if hasattr(inner, "eqns"):
                    found += _primitive_params(inner, name)
    return found


def test_model_gradient_of_a_grouped_conv_has_no_batch_grouped_convolution():
    ops = [new_op("g", "CONV", ["input"], op_kwargs={"features": 16, "kernel_size": 3,
                                                      "feature_group_count": 8})]
    model = Model(new_graph(["input"], ["g"], ops), {})
    x = jnp.ones((2, 8, 8, 8))
    variables = model.init(jax.random.PRNGKey(0), x)
    assert variables["params"]["g"]["kernel"].shape == (3, 3, 1, 16)
    jaxpr = jax.make_jaxpr(jax.grad(lambda v: model.apply(v, x).sum()))(variables)
    convs = _primitive_params(jaxpr.jaxpr, "conv_general_dilated")
    assert convs and all(p["batch_group_count"] == 1 for p in convs)
    assert any(p["feature_group_count"] == 8 for p in convs)
