import jax.numpy as jnp
import pytest

from nas.graph import symbolic


def resolve(value, shapes=((2, 8, 8, 16),), tensors=None, constants=None):
    return symbolic.resolve(value, shapes, tensors or {}, constants or {})


@pytest.mark.parametrize("value,expected", [
    ("S:-1", 16), ("S:-1*2", 32), ("S:-1%4", 4), ("S:-1%4*3", 12), ("S:1", 8), ("3", 3),
    ("0.5", 0.5), ("B", "B"), ("SAME", "SAME"), (["S:-1", 2], (16, 2)),
])
def test_resolve(value, expected):
    assert resolve(value) == expected


def test_resolve_named_tensor_input_index_and_constant():
    tensors = {"block/in:0": jnp.zeros((1, 4, 4, 24))}
    assert resolve("S:block/in:-1%2", tensors=tensors) == 12
    assert resolve("S:1:-1", shapes=((1, 3), (1, 5))) == 5
    assert resolve("K:width*2", constants={"width": 7}) == 14


def test_resolve_initializer():
    init = resolve("I:normal:stddev:1e-6")
    assert callable(init)
    assert resolve("I:zeros") is symbolic.initializers.zeros


@pytest.mark.parametrize("value,message", [
    ("S:-1%3", "3 is not a factor of 16"), ("S:7", "out of range"), ("K:nope", "no graph constant"),
    ("S:2:-1", "only 1 input"), ("S:ghost:-1", "no earlier tensor"), ("S:-1*2%4", "multiplier"),
])
def test_resolve_errors(value, message):
    with pytest.raises(ValueError, match=message):
        resolve(value)


def test_split_factors():
    assert symbolic.split_factors("S:-1%4*2") == ("S:-1", 4, 2)
