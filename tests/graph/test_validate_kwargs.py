"""Kwargs that pass parsing but cannot work inside JAX are refused, naming the op."""

import pytest

from nas.graph import OpType, new_graph, new_op


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
