"""The max pool with a separable gradient: flax's values and FLOPs, the same gradient where
each window has one maximum, and the whole gradient routed to the maxima where it has ties."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, new_graph, new_op, pooling
from nas.train import flops

CASES = [  # input shape, window, strides, padding
    ((2, 9, 9, 4), (4, 4), (1, 1), "SAME"),
    ((2, 8, 8, 3), (3, 3), (2, 2), "SAME"),
    ((2, 8, 8, 3), (2, 2), (2, 2), "VALID"),
    ((2, 11, 7, 2), (3, 2), (2, 3), "VALID"),
    ((2, 10, 10, 2), (3, 3), (3, 3), ((1, 2), (0, 1))),
    ((2, 12, 5), (3,), (2,), "SAME"),  # one spatial dim
]


@pytest.mark.parametrize("shape,window,strides,padding", CASES)
def test_values_gradients_and_flops_equal_flax(shape, window, strides, padding):
    x = jax.random.normal(jax.random.PRNGKey(0), shape)  # continuous: no ties

    def loss(pool):
        def f(x):
            y = pool(x, window, strides=strides, padding=padding)
            return jnp.sum(jnp.sin(y)), y
        return f

    (_, want), g_flax = jax.value_and_grad(loss(nn.max_pool), has_aux=True)(x)
    (_, got), g_ours = jax.value_and_grad(loss(pooling.max_pool), has_aux=True)(x)
    np.testing.assert_array_equal(got, want)  # the forward pass is reduce_window's own
    np.testing.assert_allclose(g_ours, g_flax, rtol=1e-6, atol=1e-6)
    count = [flops.count(lambda x, p=p: loss(p)(x)[1], x)
             for p in (nn.max_pool, pooling.max_pool)]
    assert count[0] == count[1] > 0


def test_tied_maxima_share_the_gradient_and_lose_none():
    x = jnp.zeros((1, 4, 4, 1)).at[0, 0, 0, 0].set(1.0)  # one peak, zeros elsewhere
    g = jax.grad(lambda x: jnp.sum(pooling.max_pool(x, (2, 2), (2, 2))))(x)
    g_flax = jax.grad(lambda x: jnp.sum(nn.max_pool(x, (2, 2), (2, 2))))(x)
    assert float(g[0, 0, 0, 0]) == 1.0  # the unique maximum gets all of its window's
    np.testing.assert_allclose(jnp.sum(g), jnp.sum(g_flax))  # ties split, total kept
    assert float(jnp.min(g)) >= 0.0


def test_an_ir_model_uses_it_and_never_select_and_scatter():
    ops = [new_op("pool", "MAX_POOL", ["input"],
                  input_kwargs={"window_shape": 3, "strides": 1, "padding": "SAME"}),
           new_op("out", "MEAN", ["pool"], input_kwargs={"axis": (1, 2)})]
    model = Model(new_graph(["input"], ["out"], ops), {})
    x = jnp.ones((2, 6, 6, 3))
    variables = model.init(jax.random.PRNGKey(0), x)
    grad = jax.grad(lambda x: jnp.sum(model.apply(variables, x)))
    assert "select_and_scatter" not in str(jax.make_jaxpr(grad)(x))


@pytest.mark.parametrize("window,strides,padding,match", [
    ((2, 2), (1,), "SAME", "one entry per spatial axis"),
    ((2, 2, 2, 2), None, "SAME", "one entry per spatial axis"),
    ((2, 2), (1, 1), [(0, 0)], "one \\(low, high\\) pair"),
])
def test_bad_windows_name_what_was_expected(window, strides, padding, match):
    with pytest.raises(ValueError, match=match):
        pooling.max_pool(jnp.ones((1, 4, 4, 2)), window, strides, padding)
