"""`K:` constants keep their value: a float kwarg gets the float, an int kwarg an int."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, OpType, new_graph, new_op

KEY = jax.random.PRNGKey(0)


def one_op(op_type, input_kwargs=None, op_kwargs=None):
    op = new_op("a", op_type, ["input"], input_kwargs=input_kwargs, op_kwargs=op_kwargs)
    return new_graph(["input"], ["a"], [op])


def test_float_constants_are_not_truncated():
    x = jnp.ones((4, 100))
    mul = Model(one_op(OpType.SCALAR_MUL, {"const": "K:c"}), {"c": 0.5})
    assert float(mul.apply({}, x).mean()) == 0.5
    drop = Model(one_op(OpType.DROPOUT, op_kwargs={"rate": "K:r"}), {"r": 0.5})
    y = drop.apply({}, x, deterministic=False, rngs={"dropout": KEY})
    assert 0.3 < float(jnp.mean(y == 0)) < 0.7


def test_integral_constants_become_ints():
    for features in (3, np.int64(3), 3.0):
        model = Model(one_op(OpType.DENSE, op_kwargs={"features": "K:f"}), {"f": features})
        assert model.apply(model.init(KEY, jnp.ones((2, 5))), jnp.ones((2, 5))).shape == (2, 3)


@pytest.mark.parametrize("value, expected", [
    (2.5, "expected an int >= 1"), (True, "expected an int >= 1"), (None, "int >= 1"),
    ("3", "int >= 1"), (0, "int >= 1"), (-3, "int >= 1"),
])
def test_bad_int_constant_names_op_kwarg_and_constant(value, expected):
    model = Model(one_op(OpType.DENSE, op_kwargs={"features": "K:f"}), {"f": value})
    with pytest.raises(ValueError, match=expected) as info:
        model.init(KEY, jnp.ones((2, 5)))
    assert all(part in str(info.value) for part in ("'a'", "'features'", "'f'"))


@pytest.mark.parametrize("op_type, kwargs, value, expected", [
    (OpType.SCALAR_ADD, {"const": "K:c"}, None, "expected a number"),
    (OpType.SCALAR_ADD, {"const": "K:c"}, "x", "expected a number"),
    (OpType.STOCH_DEPTH, {"layer_drop_rate": "K:c"}, 1.5, "probability"),
    (OpType.SCALAR_ADD, {"const": "K:c*2"}, 0.5, "factors need an int"),
])
def test_bad_float_constant_is_value_error(op_type, kwargs, value, expected):
    model = Model(one_op(op_type, kwargs), {"c": value})
    with pytest.raises(ValueError, match=expected) as info:
        model.init(KEY, jnp.ones((2, 5)))
    assert "'a'" in str(info.value)
