"""Failures while running a graph are ValueErrors naming the op; conv and pool kwargs must
fit the input rank (spatial axes + features, with or without one batch axis, as flax reads
it) instead of silently treating axes as batch axes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.graph.model import PASSTHROUGH_ERRORS
from nas.properties import graph_shapes
from nas.zoo import cnn

KEY = jax.random.PRNGKey(0)
X = jnp.zeros((2, 8, 8, 3))


def one_op(op_type, input_kwargs=None, op_kwargs=None):
    op = new_op("a", op_type, ["input"], input_kwargs=input_kwargs, op_kwargs=op_kwargs)
    return new_graph(["input"], ["a"], [op])


BAD_RANK = [
    (OpType.CONV, None, {"features": 4, "kernel_size": (3, 3, 3, 3)}, X, "kernel_size"),
    # Two leading axes before (spatial, spatial, features): flax would merge them into one
    # batch axis; refused.
    (OpType.CONV, None, {"features": 4, "kernel_size": (3, 3)}, jnp.zeros((2, 2, 8, 8, 3)),
     "rank 3 \\(unbatched\\) or 4 \\(batched\\)"),
    (OpType.CONV, None, {"features": 4, "kernel_size": (3,)}, X, "kernel_size"),
    (OpType.CONV, None, {"features": 4, "kernel_size": 3, "strides": (2, 2, 2)}, X, "strides"),
    (OpType.CONV, None, {"features": 4, "kernel_size": 3}, jnp.zeros((8,)), "batched input"),
    (OpType.AVG_POOL, {"window_shape": (2, 2, 2, 2)}, None, X, "window_shape"),
    (OpType.MAX_POOL, {"window_shape": (2,)}, None, X, "window_shape"),
    (OpType.AVG_POOL, {"window_shape": (2, 2), "padding": ((0, 1),)}, None, X, "padding"),
    (OpType.MAX_POOL, {"window_shape": 2, "strides": (1,)}, None, X, "strides"),
    (OpType.AVG_POOL, {"window_shape": 2}, None, jnp.zeros((8,)), "batched input"),
]


@pytest.mark.parametrize("op_type, in_kw, op_kw, x, message", BAD_RANK)
def test_conv_and_pool_kwargs_must_fit_the_input_rank(op_type, in_kw, op_kw, x, message):
    graph = one_op(op_type, in_kw, op_kw)
    with pytest.raises(ValueError, match=message) as info:
        Model(graph).init(KEY, x)
    assert f"op 'a' ({op_type.name})" in str(info.value)
    with pytest.raises(ValueError, match=message) as info:
        graph_shapes(graph, {}, {"input": x.shape})
    assert "op 'a'" in str(info.value)


def test_a_conv_on_flat_features_is_a_grouped_dense_layer():
    # The search synthesizes these after a FLATTEN: no spatial axis, a block-diagonal dense.
    graph = one_op(OpType.CONV, None, {"features": 4, "kernel_size": 3,
                                       "feature_group_count": 2})
    x = jnp.arange(16.0).reshape(2, 8)
    variables = Model(graph).init(KEY, x)
    kernel = variables["params"]["a"]["kernel"]
    assert kernel.shape == (4, 4)
    y = Model(graph).apply(variables, x)
    np.testing.assert_allclose(y[:, :2], x[:, :4] @ kernel[:, :2], rtol=1e-5)
    np.testing.assert_allclose(y[:, 2:], x[:, 4:] @ kernel[:, 2:], rtol=1e-5)


@pytest.mark.parametrize("op_type, in_kw, op_kw, x", [
    (OpType.CONV, None, {"features": 4, "kernel_size": 3, "padding": "NONSENSE"}, X),
    (OpType.CONV, None, {"features": 4, "kernel_size": 3, "feature_group_count": 2}, X),
    (OpType.DENSE, None, {"features": [4]}, X),
    (OpType.TRANSPOSE, {"axes": (0, 0)}, None, X),
    (OpType.EINSUM, {"sum": 5}, None, X),
])
def test_op_failures_are_value_errors_naming_the_op(op_type, in_kw, op_kw, x):
    if op_type is OpType.EINSUM:
        graph = new_graph(["input"], ["a"], [new_op("a", op_type, ["input", "input"], in_kw)])
    else:
        graph = one_op(op_type, in_kw, op_kw)
    with pytest.raises(ValueError, match=f"op 'a' \\({op_type.name}\\) failed on inputs") as info:
        Model(graph).init(KEY, x)
    assert info.value.__cause__ is not None


def test_non_array_inputs_are_value_errors():
    graph, constants, _ = cnn.CifarNet()
    model = Model(graph, constants)
    variables = model.init(KEY, jnp.ones((1, 32, 32, 3)))
    for bad in ([jnp.ones((1, 32, 32, 3))], "s", None):
        with pytest.raises(ValueError, match="graph input 'input:0' must be an array"):
            model.apply(variables, bad)


def test_resource_and_tracer_errors_pass_unchanged(monkeypatch):
    from nas.graph import model as model_module

    def boom(*args, **kwargs):
        raise MemoryError("out of host memory")

    assert MemoryError in PASSTHROUGH_ERRORS
    assert jax.errors.ConcretizationTypeError in PASSTHROUGH_ERRORS
    monkeypatch.setattr(model_module, "exec_op", boom)
    with pytest.raises(MemoryError):
        Model(one_op(OpType.RELU)).init(KEY, X)
