"""The configurable search space: which ops and widths synthesis may use in a search."""

import pytest

from nas.graph.ops import OpType, new_op
from nas.mutation import MutationConfig, NoChildFound, propose_child
from nas.synthesis.search_space import SearchSpace, op_enumerator
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables


def test_squashing_ops_only_where_the_parent_had_them():
    space = SearchSpace()
    plain = [new_op("a", OpType.CONV, ["x"], op_kwargs={"features": 8}),
             new_op("b", OpType.RELU, ["a"])]
    allowed = space.allowed_types(plain)
    assert OpType.SOFTMAX not in allowed and OpType.SIGMOID not in allowed
    assert OpType.CONV in allowed and OpType.RELU in allowed
    with_sigmoid = [*plain, new_op("c", OpType.SIGMOID, ["b"])]
    allowed = space.allowed_types(with_sigmoid)
    assert OpType.SIGMOID in allowed and OpType.SOFTMAX not in allowed


def _pool_windows(space, defaults, full):
    ops = op_enumerator("", defaults, full=full, op_types=(OpType.AVG_POOL, OpType.MAX_POOL),
                        space=space)
    return {op.input_kwargs["window_shape"] for op in ops}


@pytest.mark.parametrize("full", [False, True])
def test_whole_input_pool_windows_only_where_the_parent_had_one(full):
    assert 0 not in _pool_windows(SearchSpace(), {}, full)
    assert 2 in _pool_windows(SearchSpace(), {}, full)
    assert 0 in _pool_windows(SearchSpace(), {"window_shape": {0}}, full)  # inherited
    assert 0 in _pool_windows(SearchSpace(full_window_pools=True), {}, full)


def test_op_types_restrict_the_vocabulary():
    space = SearchSpace(op_types=["conv", "RELU", "SOFTMAX"], inherit_only=[])
    assert space.allowed_types([]) == (OpType.CONV, OpType.RELU, OpType.SOFTMAX)
    types = {op.type for op in op_enumerator("", {}, full=False,
                                             op_types=space.allowed_types([]), space=space)}
    assert types == {OpType.CONV, OpType.RELU, OpType.SOFTMAX}


def test_width_factors_bound_synthesized_widths():
    space = SearchSpace(width_factors=["%2", "", "*2"])
    widths = {op.op_kwargs["features"] for op in op_enumerator(
        "", {}, full=True, op_types=(OpType.DENSE,), space=space)}
    assert widths == {"S:-1%2", "S:-1", "S:-1*2"}
    reference = {op.op_kwargs["features"] for op in op_enumerator(
        "", {}, full=True, op_types=(OpType.DENSE,))}
    assert {"S:-1%4", "S:-1*4"} <= reference


@pytest.mark.parametrize("bad, field", [
    ({"op_types": ["NOPE"]}, "op_types"),
    ({"op_types": "CONV"}, "op_types"),
    ({"inherit_only": ["FLATTEN"]}, "inherit_only"),
    ({"width_factors": ["x2"]}, "width_factors"),
    ({"width_factors": []}, "width_factors"),
    ({"full_window_pools": "yes"}, "full_window_pools"),
    ({"colour": 1}, "unknown"),
])
def test_bad_search_space_names_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        SearchSpace.from_dict(bad)
    with pytest.raises(ValueError, match=field):
        MutationConfig.from_dict({"search_space": bad})


def test_children_of_cifarnet_use_no_squashing_op_or_scalar_multiply_by_default():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    config = {"linear_p": None, "time_limit_s": 10.0}
    found = 0
    for seed in range(8):
        try:
            child = propose_child(graph, constants, variables, seed=seed, config=config)
        except NoChildFound:
            continue
        found += 1
        types = {op.type for op in child.graph.ops}
        assert not types & {OpType.SOFTMAX, OpType.SIGMOID, OpType.SCALAR_MUL}, seed
    assert found >= 5
