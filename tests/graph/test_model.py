import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.zoo import cnn


def test_cifarnet_tensor_mode_and_param_naming():
    graph, constants, _ = cnn.CifarNet()
    before = copy.deepcopy(graph)
    model = Model(graph, constants)
    variables = model.init(jax.random.PRNGKey(0), jnp.ones((1, 32, 32, 3)))
    assert set(variables) == {"params"}
    assert set(variables["params"]["conv_layer0/conv"]) == {"kernel", "bias"}
    assert variables["params"]["conv_layer1/conv"]["kernel"].shape == (3, 3, 64, 128)
    assert model.apply(variables, jnp.ones((4, 32, 32, 3))).shape == (4, 10)
    assert graph == before, "symbolic kwargs must not be written back into the graph"


def test_dict_mode_and_all_intermediates():
    graph, constants, _ = cnn.CifarNet()
    model = Model(graph, constants)
    x = {"input": jnp.ones((2, 32, 32, 3))}
    variables = model.init(jax.random.PRNGKey(0), x)
    out = model.apply(variables, x)
    assert list(out) == ["fc/logits"] and out["fc/logits"].shape == (2, 10)
    graph.output_names = []
    everything = Model(graph, constants).apply(variables, x)
    assert len(everything) == 11 and "input:0" not in everything and "num_classes" not in everything
    assert everything["conv_layer0/conv:0"].shape == (2, 32, 32, 64)


def test_missing_dict_input_is_value_error():
    graph, constants, _ = cnn.CifarNet()
    with pytest.raises(ValueError, match="missing"):
        Model(graph, constants).init(jax.random.PRNGKey(0), {"image": jnp.ones((1, 32, 32, 3))})


def _run(ops, x, outputs=("out",), rngs=None, **kw):
    graph = new_graph(["input"], list(outputs), ops)
    model = Model(graph, {})
    variables = model.init(jax.random.PRNGKey(0), x)
    return model.apply(variables, x, rngs=rngs, **kw), variables


def test_function_ops():
    x = jnp.arange(24.0).reshape(2, 3, 4)
    y, _ = _run([new_op("out", OpType.TRANSPOSE, ["input"], input_kwargs={"axes": [0, 2, 1]})], x)
    assert y.shape == (2, 4, 3)
    y, _ = _run([new_op("out", OpType.RESHAPE, ["input"],
                        input_kwargs={"new_shape": ["B", -1, "S:-1%2"]})], x)
    assert y.shape == (2, 6, 2)
    y, _ = _run([new_op("out", OpType.SCALAR_MUL, ["input"])], x)
    np.testing.assert_allclose(y, x / 2.0)
    y, _ = _run([new_op("out", OpType.SCALAR_ADD, ["input"], input_kwargs={"const": "1.5"})], x)
    np.testing.assert_allclose(y, x + 1.5)
    y, _ = _run([new_op("out", OpType.MEAN, ["input"], input_kwargs={"axis": [1, 2]})], x)
    assert y.shape == (2,)
    y, _ = _run([new_op("out", OpType.EINSUM, ["input", "input"],
                        input_kwargs={"sum": "bij,bkj->bik"})], x)
    assert y.shape == (2, 3, 3)


def test_global_pool_window_zero_and_param_op():
    x = jnp.ones((2, 6, 6, 5))
    y, _ = _run([new_op("out", OpType.AVG_POOL, ["input"], input_kwargs={"window_shape": 0})], x)
    assert y.shape == (2, 1, 1, 5)
    ops = [new_op("p", OpType.PARAM, [], input_kwargs={"init_fn": "I:ones", "shape": [1, 6, 6, 5]}),
           new_op("out", OpType.ADD, ["input", "p"])]
    y, variables = _run(ops, x)
    assert variables["params"]["p"].shape == (1, 6, 6, 5)
    np.testing.assert_allclose(y, 2.0)


def test_batch_norm_and_dropout_flags():
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 4))
    ops = [new_op("bn", OpType.BATCH_NORM, ["input"]),
           new_op("out", OpType.DROPOUT, ["bn"], op_kwargs={"rate": 0.5})]
    graph = new_graph(["input"], ["out"], ops)
    model = Model(graph, {})
    variables = model.init(jax.random.PRNGKey(0), x)
    assert set(variables) == {"params", "batch_stats"}
    y, updates = model.apply(variables, x, deterministic=False, training=True,
                             rngs={"dropout": jax.random.PRNGKey(2)}, mutable=["batch_stats"])
    assert float(jnp.mean(y == 0)) > 0.2
    assert not np.allclose(updates["batch_stats"]["bn"]["mean"], 0)
    eval_y = model.apply(variables, x)
    assert float(jnp.mean(eval_y == 0)) == 0


def test_stochastic_depth_drops_whole_examples():
    x = jnp.ones((64, 3))
    ops = [new_op("out", OpType.ADD, ["input", "input"], input_kwargs={"layer_drop_rate": 0.5})]
    y, _ = _run(ops, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(0)})
    rows = set(np.unique(np.asarray(y), axis=0)[:, 0].tolist())
    assert rows == {1.0, 3.0}
    y, _ = _run(ops, x)
    np.testing.assert_allclose(y, 2.0)


def test_unresolvable_symbolic_value_at_run_time():
    ops = [new_op("out", OpType.DENSE, ["input"], op_kwargs={"features": "S:-1%3"})]
    with pytest.raises(ValueError, match="op 'out' kwarg 'features'.*3 is not a factor of 4"):
        _run(ops, jnp.ones((2, 4)))


@pytest.mark.parametrize("op", [
    new_op("layer", OpType.CONV, ["input"], op_kwargs={"features": 4, "kernel_size": 3}),
    new_op("layer", OpType.DENSE, ["input"], op_kwargs={"features": 4}),
    new_op("layer", OpType.LAYER_NORM, ["input"]),
    new_op("layer", OpType.PARAM, [], input_kwargs={
        "shape": (5, 3), "init_fn": "I:normal"}),
])
def test_init_draws_real_values_and_apply_still_checks_param_shapes(op):
    """Applying gives layers a cheap initializer (flax traces it only to check shapes)."""
    graph = new_graph(["input"], ["layer"], [op])
    model = Model(graph, {})
    x = jnp.ones((2, 5, 5, 3))
    variables = model.init(jax.random.PRNGKey(0), x)
    drawn = variables["params"]["layer"]
    drawn = drawn if op.type is OpType.PARAM else drawn.get("kernel", drawn.get("scale"))
    assert float(jnp.abs(drawn).sum()) > 0  # the op's own initializer, not zeros
    model.apply(variables, x)
    wrong = jax.tree.map(lambda a: jnp.zeros((*a.shape[:-1], a.shape[-1] + 1)), variables)
    with pytest.raises(Exception, match="shape"):
        model.apply(wrong, x)
