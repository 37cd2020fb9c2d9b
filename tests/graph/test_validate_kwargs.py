"""Kwargs that pass parsing but cannot work inside JAX are refused, naming the op."""

import pytest

from nas.graph import Graph, Op, OpType, new_graph, new_op, validate


@pytest.mark.parametrize("op_type, kwargs, match", [
    (OpType.DENSE, {"features": -3}, "sizes must be positive"),
    (OpType.DENSE, {"features": 0}, "sizes must be positive"),
    (OpType.DENSE, {"features": 2.5}, "expected an int"),
    (OpType.DENSE, {"features": True}, "expected an int"),
    (OpType.DENSE, {"features": {"a": 1}}, "expected an int"),
    (OpType.CONV, {"features": 4, "kernel_size": (3, -1)}, "kernel_size"),
    (OpType.DENSE, {"features": 4, "kernel_init": {"fn": "zeros"}}, "expected an initializer"),
    (OpType.DENSE, {"features": 4, "kernel_init": 3}, "expected an initializer"),
    (OpType.DENSE, {"features": 4, "bias_init": "I:Initializer"}, "not a flax initializer"),
    (OpType.DROPOUT, {"rate": 1.5}, "probability"),
    (OpType.DROPOUT, {"rate": "high"}, "rate"),
])
def test_unworkable_kwargs_name_the_op(op_type, kwargs, match):
    ops = [new_op("bad", op_type, ["input"], op_kwargs=kwargs)]
    with pytest.raises(ValueError, match=match) as info:
        new_graph(["input"], ["bad"], ops)
    assert "'bad'" in str(info.value)


def test_symbolic_and_global_window_values_still_pass():
    ops = [new_op("c", OpType.CONV, ["input"], op_kwargs={"features": "S:-1*2",
                                                          "kernel_size": (3, 3)}),
           new_op("p", OpType.AVG_POOL, ["c"], input_kwargs={"window_shape": 0}),
           new_op("d", OpType.DENSE, ["p"], op_kwargs={"features": 4,
                                                       "kernel_init": "I:normal:stddev:0.1"})]
    new_graph(["input"], ["d"], ops)


@pytest.mark.parametrize("op_type, kwargs, match", [
    (OpType.DENSE, {"features": 4, "use_bias": "no"}, "expected True or False"),
    (OpType.BATCH_NORM, {"use_scale": 1}, "expected True or False"),
    (OpType.CONV, {"features": 4, "kernel_size": ("a", "b")}, "expected an int"),
    (OpType.DENSE, {"features": ("x",)}, "expected an int"),
    (OpType.CONV, {"features": 4, "kernel_size": ("I:zeros", 3)}, "expected an int"),
])
def test_kwargs_of_the_wrong_kind_name_the_op(op_type, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        new_graph(["input"], ["bad"], [new_op("bad", op_type, ["input"], op_kwargs=kwargs)])
    assert "'bad'" in str(info.value)


@pytest.mark.parametrize("op_type, kwargs, match", [
    (OpType.BATCH_NORM, {"use_running_average": "no"}, "expected True or False"),
    (OpType.RESHAPE, {"new_shape": ("B", "x")}, "expected an int"),
    (OpType.SCALAR_ADD, {"const": None}, "expected a number"),
    (OpType.SCALAR_ADD, {"const": "x"}, "expected a number"),
    (OpType.SCALAR_ADD, {"const": [1]}, "expected a number"),
])
def test_input_kwargs_of_the_wrong_kind_name_the_op(op_type, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        new_graph(["input"], ["bad"], [new_op("bad", op_type, ["input"], input_kwargs=kwargs)])
    assert "'bad'" in str(info.value)


def test_valid_kinds_still_pass():
    ops = [new_op("bn", OpType.BATCH_NORM, ["input"], input_kwargs={"use_running_average": None},
                  op_kwargs={"use_bias": False}),
           new_op("r", OpType.RESHAPE, ["bn"], input_kwargs={"new_shape": ("B", "K:n", -1)}),
           new_op("m", OpType.SCALAR_MUL, ["r"]),
           new_op("s", OpType.SCALAR_ADD, ["m"], input_kwargs={"const": "K:c"})]
    new_graph(["input"], ["s"], ops)


def test_num_outputs_only_where_the_type_has_several():
    with pytest.raises(ValueError, match="RELU has one output"):
        new_op("n", OpType.RELU, ["input"], num_outputs=2)
    for bad, match in ((2, "RELU has one output"), (True, "positive int")):
        raw = Op("n", OpType.RELU, ["input:0"], num_outputs=bad)
        with pytest.raises(ValueError, match=match):
            validate(Graph(["input"], ["n"], [raw]))


def test_duplicate_graph_outputs_are_refused():
    with pytest.raises(ValueError, match="same tensor twice"):
        new_graph(["input"], ["n", "n:0"], [new_op("n", OpType.RELU, ["input"])])


def test_new_graph_argument_kinds():
    ops = [new_op("a", OpType.RELU, ["input"])]
    with pytest.raises(ValueError, match="input_names must be a list"):
        new_graph("input", ["a"], ops)
    with pytest.raises(ValueError, match="ops must be a list"):
        new_graph(["input"], ["a"], ops[0])


def test_new_graph_canonicalizes_raw_op_inputs():
    graph = new_graph(["input"], ["a"], [Op("a", OpType.RELU, ["input"])])
    assert graph.ops[0].input_names == ["input:0"]
    assert graph == new_graph(["input"], ["a"], [new_op("a", OpType.RELU, ["input"])])
