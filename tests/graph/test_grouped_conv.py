"""The grouped convolution with a per-tap kernel gradient: the same values, gradients and
FLOPs as lax's, and an IR model's gradient never uses XLA's slow batch-grouped kernel
gradient."""

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
    np.testing.assert_array_equal(y_ours, y_lax)  # the forward pass is lax's own
    for ours, theirs in zip(g_ours, g_lax, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    count = [flops.count(lambda x, w, c=c: loss(c)(x, w)[1], x, w)
             for c in (jax.lax.conv_general_dilated, grouped_conv.conv_general_dilated)]
    assert count[0] == count[1] > 0


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
            inner = getattr(value, "jaxpr", value)
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
