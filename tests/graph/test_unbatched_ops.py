"""Conv and pool ops on an unbatched input (spatial..., features), as flax runs them: a
kernel or window with one entry per spatial axis on an input of rank entries + 1 is one
example. It must compute what the same op computes on a batch of one, and shape inference
must agree with execution."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.properties import graph_shapes
from nas.train import flops

KEY = jax.random.PRNGKey(0)


def one_op(op_type, input_kwargs=None, op_kwargs=None):
    op = new_op("a", op_type, ["input"], input_kwargs=input_kwargs, op_kwargs=op_kwargs)
    return new_graph(["input"], ["a"], [op])


UNBATCHED = [
    (OpType.CONV, None, {"features": 10, "kernel_size": (3, 3)}, (5, 5, 5)),
    (
        OpType.CONV,
        None,
        {"features": 4, "kernel_size": (3, 3), "strides": (2, 1), "padding": "VALID"},
        (7, 6, 2),
    ),
    (
        OpType.CONV,
        None,
        {"features": 6, "kernel_size": [3, 3], "feature_group_count": 2, "kernel_dilation": (2, 1)},
        (7, 7, 4),
    ),
    (OpType.CONV, None, {"features": 3, "kernel_size": (3,), "strides": 2}, (9, 2)),
    (OpType.CONV, None, {"features": 4, "kernel_size": (2, 2, 2)}, (4, 4, 4, 3)),
    (OpType.AVG_POOL, {"window_shape": (2, 2), "strides": (2, 2)}, None, (6, 6, 3)),
    (OpType.AVG_POOL, {"window_shape": (0, 0)}, None, (5, 7, 3)),
    (OpType.MAX_POOL, {"window_shape": (3, 3), "strides": 1, "padding": "SAME"}, None, (5, 5, 2)),
    (OpType.MAX_POOL, {"window_shape": [2, 0], "padding": ((1, 0), (0, 0))}, None, (5, 4, 2)),
]


@pytest.mark.parametrize("op_type, in_kw, op_kw, shape", UNBATCHED)
def test_unbatched_op_computes_a_batch_of_one(op_type, in_kw, op_kw, shape):
    graph = one_op(op_type, in_kw, op_kw)
    x = jax.random.uniform(KEY, shape)
    model = Model(graph)
    variables = jax.jit(model.init)(KEY, x)
    assert jax.tree.map(jnp.shape, variables) == jax.tree.map(
        jnp.shape, jax.eval_shape(model.init, KEY, x[None])
    )

    @jax.jit
    def unbatched_and_batched(v):
        def one(u):
            return model.apply(variables, u)

        def batch_of_one(u):
            return model.apply(variables, u[None])[0]

        return [(f(v), jax.grad(lambda u, f=f: f(u).sum())(v)) for f in (one, batch_of_one)]

    (y, grad), (y_batched, grad_batched) = unbatched_and_batched(x)
    np.testing.assert_allclose(y, y_batched, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad, grad_batched, rtol=1e-6, atol=1e-6)
    assert graph_shapes(graph, {}, {"input": shape}).shape("a") == y.shape
    # The unbatched op costs what one example of the batched op costs.
    assert flops.count(model.apply, variables, x) == flops.count(model.apply, variables, x[None])


def test_unbatched_conv_matches_flax():
    x = jax.random.uniform(KEY, (5, 5, 5))
    model = Model(one_op(OpType.CONV, None, {"features": 10, "kernel_size": (3, 3)}))
    variables = model.init(KEY, x)
    conv = nn.Conv(10, (3, 3)).apply({"params": variables["params"]["a"]}, x)
    assert conv.shape == (5, 5, 10)
    np.testing.assert_allclose(model.apply(variables, x), conv, rtol=1e-6, atol=1e-6)
