"""The configurable search space: which ops and widths synthesis may use in a search."""

import random

import jax.numpy as jnp
import pytest

from nas.graph.ops import OpType, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.mutation import MutationConfig, NoChildFound, propose_child
from nas.mutation.config import DEFAULT_SYNTHESIS
from nas.properties.depth import DepthProperty
from nas.properties.shape import ShapeProperty
from nas.synthesis.base import SynthesisError
from nas.synthesis.linear_output import linear_output_property
from nas.synthesis.progressive import ProgressiveSequentialSynthesizer
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


@pytest.mark.parametrize("full", [False, True])
def test_pool_windows_bound_synthesized_windows(full):
    assert 8 not in _pool_windows(SearchSpace(), {}, full)
    assert 8 in _pool_windows(SearchSpace(), {"window_shape": {8}}, full)  # inherited
    assert 8 in _pool_windows(None, {}, True)  # the reference's space had 8
    assert _pool_windows(SearchSpace(pool_windows=[5]), {}, full) == {5}
    wide = _pool_windows(SearchSpace(pool_windows=[2, 8], full_window_pools=True), {}, full)
    assert wide == ({0, 2, 8} if full else {0, 2})


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
    ({"linear_outputs": 1}, "linear_outputs"),
    ({"pool_windows": []}, "pool_windows"),
    ({"pool_windows": [0]}, "pool_windows"),
    ({"pool_windows": ["8"]}, "pool_windows"),
    ({"pool_windows": 4}, "pool_windows"),
    ({"colour": 1}, "unknown"),
])
def test_bad_search_space_names_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        SearchSpace.from_dict(bad)
    with pytest.raises(ValueError, match=field):
        MutationConfig.from_dict({"search_space": bad})


@pytest.mark.slow
def test_children_of_cifarnet_use_no_squashing_op_or_scalar_multiply_by_default():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    config = {"linear_p": None, "time_limit_s": 600.0}  # never binding, even at load
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


def _context(names, exported, props=()):
    """The CifarNet chain of ops `names`, replacing the tensor `exported`."""
    graph, constants, _ = cnn.CifarNet()
    ops = [op for op in graph.ops if op.name in names]
    spec = [SubgraphNode(op, []) for op in ops[:-1]] + [SubgraphNode(ops[-1], [exported])]
    model = SubgraphModel(graph, constants, None, {"input": jnp.ones((2, 32, 32, 3))}, spec)
    return [(model, [p.infer(model) for p in props])]


def _last_types(space):
    """The last op types of new classifiers (CifarNet's `fc/relu, fc/logits` replaced)."""
    types = []
    for seed in range(24):
        contexts = _context(["fc/relu", "fc/logits"], "fc/logits:0",
                            [ShapeProperty(), DepthProperty(p=0.5)])
        model, (shape, depth) = contexts[0]
        contexts = [(model, [shape, depth.mutate(seed)])]  # chains of other depths
        synth = ProgressiveSequentialSynthesizer(contexts, seed, rng=random.Random(seed),
                                                 space=space, **DEFAULT_SYNTHESIS["progressive"])
        try:
            (new,) = synth.synthesize()
        except SynthesisError:  # the search then proposes another child
            continue
        types.append(new.subgraph[-1].op.type)
    assert len(types) >= 16, types
    return set(types)


def test_a_new_classifier_ends_with_a_linear_layer():
    assert _last_types(SearchSpace()) <= {OpType.DENSE, OpType.CONV}
    unconstrained = _last_types(SearchSpace(linear_outputs=False))
    assert unconstrained - {OpType.DENSE, OpType.CONV}, unconstrained


def test_linear_outputs_constrain_only_chains_that_compute_a_network_output():
    ((head, _),) = _context(["fc/relu", "fc/logits"], "fc/logits:0")
    assert linear_output_property(head).output == "fc/logits:0"
    ((inner, _),) = _context(["fc/dense", "fc/relu"], "fc/relu:0")
    assert linear_output_property(inner) is None
