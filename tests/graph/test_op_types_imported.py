"""The op types real Flax models need (CONCAT, RELU6, TANH, HARD_SWISH, LEAKY_RELU, ELU, and
GELU's `approximate`, MEAN's `keepdims`): each runs as the jax/flax function it names,
refuses bad kwargs in one line naming the op, and survives a JSON round trip."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.graph.ops import accepts_inputs, arity_text, input_arity, is_variadic
from nas.graph.serialize import graph_from_json, graph_to_json, load
from nas.properties.tensor_shapes import graph_shapes

X = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 4, 3)) * 3.0


def run_one(op_type, input_kwargs=None, x=X):
    graph = new_graph(["x"], ["y"], [new_op("y", op_type, ["x"], input_kwargs=input_kwargs)])
    return Model(graph).apply({}, x)


def test_values_are_stable():
    assert {t.name: t.value for t in (OpType.CONCAT, OpType.RELU6, OpType.TANH,
                                      OpType.HARD_SWISH, OpType.LEAKY_RELU, OpType.ELU)} == {
        "CONCAT": 29, "RELU6": 30, "TANH": 31, "HARD_SWISH": 32, "LEAKY_RELU": 33, "ELU": 34}
    assert len({t.value for t in OpType}) == len(OpType)


@pytest.mark.parametrize("op_type, kwargs, expected", [
    (OpType.RELU6, None, nn.relu6),
    (OpType.TANH, None, jnp.tanh),
    (OpType.HARD_SWISH, None, nn.hard_swish),
    (OpType.LEAKY_RELU, None, nn.leaky_relu),
    (OpType.LEAKY_RELU, {"negative_slope": 0.2}, lambda x: nn.leaky_relu(x, 0.2)),
    (OpType.ELU, None, nn.elu),
    (OpType.ELU, {"alpha": 0.5}, lambda x: nn.elu(x, alpha=0.5)),
    (OpType.GELU, None, nn.gelu),
    (OpType.GELU, {"approximate": True}, lambda x: nn.gelu(x, approximate=True)),
    (OpType.GELU, {"approximate": False}, lambda x: nn.gelu(x, approximate=False)),
])
def test_activation_matches_flax(op_type, kwargs, expected):
    np.testing.assert_array_equal(np.asarray(run_one(op_type, kwargs)), np.asarray(expected(X)))


def test_gelu_forms_differ_and_default_is_tanh():
    exact = run_one(OpType.GELU, {"approximate": False})
    default = run_one(OpType.GELU)
    assert not np.array_equal(np.asarray(exact), np.asarray(default))
    np.testing.assert_array_equal(np.asarray(exact), np.asarray(jax.nn.gelu(X, False)))


def test_leaky_relu_slope_from_a_graph_constant():
    graph = new_graph(["x"], ["y"], [new_op("y", OpType.LEAKY_RELU, ["x"],
                                            input_kwargs={"negative_slope": "K:slope"})])
    out = Model(graph, {"slope": 0.3}).apply({}, X)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(nn.leaky_relu(X, 0.3)))


def test_mean_keepdims():
    out = run_one(OpType.MEAN, {"axis": (1, 2), "keepdims": True})
    assert out.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(np.asarray(out),
                                  np.asarray(jnp.mean(X, axis=(1, 2), keepdims=True)))
    assert run_one(OpType.MEAN, {"axis": (1, 2)}).shape == (2, 3)


def two_branch_concat(axis=None, extra=0):
    ins = ["a", "b"] + [f"c{i}" for i in range(extra)]
    ops = [new_op("a", OpType.RELU6, ["x"]), new_op("b", OpType.TANH, ["x"])]
    ops += [new_op(f"c{i}", OpType.ELU, ["x"]) for i in range(extra)]
    kwargs = None if axis is None else {"axis": axis}
    ops.append(new_op("cat", OpType.CONCAT, ins, input_kwargs=kwargs))
    return new_graph(["x"], ["cat"], ops)


@pytest.mark.parametrize("axis, extra", [(None, 0), (-1, 1), (1, 0), (0, 2), (-3, 0)])
def test_concat_matches_jnp(axis, extra):
    out = Model(two_branch_concat(axis, extra)).apply({}, X)
    parts = [nn.relu6(X), jnp.tanh(X)] + [nn.elu(X)] * extra
    expected = jnp.concatenate(parts, axis=-1 if axis is None else axis)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_concat_axis_from_a_graph_constant_and_shape_inference():
    graph = two_branch_concat("K:axis")
    assert Model(graph, {"axis": 2}).apply({}, X).shape == (2, 4, 8, 3)
    shapes = graph_shapes(graph, {"axis": 2}, {"x": X.shape})
    assert shapes.shape("cat") == (2, 4, 8, 3)


def test_arity_model():
    assert is_variadic(OpType.CONCAT) and not is_variadic(OpType.ADD)
    assert input_arity(OpType.CONCAT) == 2 and input_arity(OpType.RELU6) == 1
    assert accepts_inputs(OpType.CONCAT, 5) and not accepts_inputs(OpType.CONCAT, 1)
    assert not accepts_inputs(OpType.ADD, 3) and accepts_inputs(OpType.PARAM, 0)
    assert arity_text(OpType.CONCAT) == "2 or more" and arity_text(OpType.ADD) == "2"


def one_line_error(build):
    with pytest.raises(ValueError) as info:
        build()
    text = str(info.value)
    assert "\n" not in text and "'bad'" in text
    return text


@pytest.mark.parametrize("op_type, inputs, kwargs, match", [
    (OpType.CONCAT, ["x"], None, "CONCAT takes 2 or more input"),
    (OpType.CONCAT, [], None, "CONCAT takes 2 or more input"),
    (OpType.CONCAT, ["x", "x"], {"axis": 1.5}, "expected one int axis"),
    (OpType.CONCAT, ["x", "x"], {"axis": True}, "expected one int axis"),
    (OpType.CONCAT, ["x", "x"], {"axis": "last"}, "axis"),
    (OpType.CONCAT, ["x", "x"], {"axis": (1, 2)}, "expected one int axis"),
    (OpType.CONCAT, ["x", "x"], {"dim": 1}, "unknown input_kwargs"),
    (OpType.GELU, ["x"], {"approximate": "no"}, "expected True or False"),
    (OpType.GELU, ["x"], {"approximate": 1}, "expected True or False"),
    (OpType.MEAN, ["x"], {"axis": 1, "keepdims": "yes"}, "expected True or False"),
    (OpType.LEAKY_RELU, ["x"], {"negative_slope": "steep"}, "expected a number"),
    (OpType.LEAKY_RELU, ["x"], {"negative_slope": True}, "expected a number"),
    (OpType.LEAKY_RELU, ["x"], {"negative_slope": float("nan")}, "expected a number"),
    (OpType.ELU, ["x"], {"alpha": [1.0]}, "expected a number"),
    (OpType.RELU6, ["x"], {"approximate": True}, "unknown input_kwargs"),
    (OpType.TANH, ["x", "x"], None, "TANH takes 1 input"),
    (OpType.HARD_SWISH, ["x"], {"alpha": 1.0}, "unknown input_kwargs"),
])
def test_bad_kwargs_are_refused_in_one_line(op_type, inputs, kwargs, match):
    text = one_line_error(lambda: new_graph(
        ["x"], ["bad"], [new_op("bad", op_type, inputs, input_kwargs=kwargs)]))
    assert match in text


@pytest.mark.parametrize("shapes, axis, match", [
    ([(2, 3), (3, 3)], -1, "equal sizes on every other axis"),
    ([(2, 3), (2, 3, 1)], -1, "one rank"),
    ([(2, 3), (2, 3)], 2, "axis 2 is outside inputs of rank 2"),
    ([(2, 3), (2, 3)], -3, "outside"),
])
def test_shapes_that_do_not_concatenate(shapes, axis, match):
    graph = new_graph(["x", "y"], ["bad"], [new_op("bad", OpType.CONCAT, ["x", "y"],
                                                   input_kwargs={"axis": axis})])
    inputs = {"x": jnp.ones(shapes[0]), "y": jnp.ones(shapes[1])}
    assert match in one_line_error(lambda: Model(graph).apply({}, inputs))
    text = one_line_error(lambda: graph_shapes(graph, {}, inputs))
    assert "malformed graph" in text and match in text


def test_concat_axis_constant_must_be_an_int():
    graph = two_branch_concat("K:axis")
    with pytest.raises(ValueError, match="graph constant 'axis'.*expected an int"):
        Model(graph, {"axis": 1.5}).apply({}, X)


def test_mul_broadcasts_a_squeeze_excite_scale():
    """x (B,H,W,C) times s (B,1,1,C), as squeeze-and-excite computes it."""
    ops = [new_op("s", OpType.MEAN, ["x"], input_kwargs={"axis": (1, 2), "keepdims": True}),
           new_op("g", OpType.SIGMOID, ["s"]),
           new_op("y", OpType.MUL, ["x", "g"])]
    graph = new_graph(["x"], ["y"], ops)
    out = Model(graph).apply({}, X)
    expected = X * nn.sigmoid(jnp.mean(X, axis=(1, 2), keepdims=True))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))
    shapes = graph_shapes(graph, {}, {"x": X.shape})
    assert shapes.shape("g") == (2, 1, 1, 3) and shapes.shape("y") == X.shape


def test_add_broadcasts_a_position_embedding_param():
    """A (1, N, D) PARAM added onto (B, N, D) tokens, as ViT's position embedding."""
    ops = [new_op("pos", OpType.PARAM, [], input_kwargs={"init_fn": "I:normal:stddev:0.02",
                                                         "shape": (1, 5, 8)}),
           new_op("y", OpType.ADD, ["x", "pos"])]
    graph = new_graph(["x"], ["y"], ops)
    tokens = jnp.ones((3, 5, 8))
    variables = Model(graph).init(jax.random.PRNGKey(0), tokens)
    out = Model(graph).apply(variables, tokens)
    pos = variables["params"]["pos"]["pos"] if isinstance(
        variables["params"]["pos"], dict) else variables["params"]["pos"]
    np.testing.assert_array_equal(np.asarray(out), np.asarray(tokens + pos))
    assert graph_shapes(graph, {}, {"x": tokens.shape}).shape("y") == (3, 5, 8)


def full_graph():
    ops = [
        new_op("r6", OpType.RELU6, ["x"]),
        new_op("th", OpType.TANH, ["x"]),
        new_op("cat", OpType.CONCAT, ["r6", "th", "x"], input_kwargs={"axis": -1}),
        new_op("hs", OpType.HARD_SWISH, ["cat"]),
        new_op("lr", OpType.LEAKY_RELU, ["hs"], input_kwargs={"negative_slope": 0.1}),
        new_op("el", OpType.ELU, ["lr"], input_kwargs={"alpha": 2.0}),
        new_op("ge", OpType.GELU, ["el"], input_kwargs={"approximate": False}),
        new_op("mn", OpType.MEAN, ["ge"], input_kwargs={"axis": (1, 2), "keepdims": True}),
    ]
    return new_graph(["x"], ["mn"], ops)


def test_json_round_trip_keeps_every_new_op_and_kwarg():
    graph = full_graph()
    text = graph_to_json(graph)
    back = graph_from_json(text)
    assert back == graph
    assert graph_to_json(*load(text)) == text
    types = [op["type"] for op in json.loads(text)["ops"]]
    assert types[:3] == ["RELU6", "TANH", "CONCAT"]
    assert back.op("ge").input_kwargs["approximate"] is False
    assert back.op("mn").input_kwargs["axis"] == (1, 2)
    np.testing.assert_array_equal(np.asarray(Model(back).apply({}, X)),
                                  np.asarray(Model(graph).apply({}, X)))


def test_json_with_a_one_input_concat_is_refused():
    data = json.loads(graph_to_json(full_graph()))
    data["ops"][2]["input_names"] = ["r6:0"]
    with pytest.raises(ValueError, match="CONCAT takes 2 or more input"):
        graph_from_json(json.dumps(data))
