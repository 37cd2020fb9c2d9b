import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nas.graph import Model, OpType, new_graph, new_op
from nas.graph.subgraph import SubgraphModel
from nas.properties import depth, linear
from nas.properties.linear import Pairing

M = Pairing.Mapping


def single_op_model(op, shape):
    graph = new_graph(["input"], ["output"], [op])
    return SubgraphModel(graph, {}, None, {"input": jnp.ones(shape)})


def positive_model(ops, shape, seed=1):
    """A chain of ops with all parameters made positive, fed positive inputs, so that no
    activation sits at a kink and concrete pairings are those of the structure."""
    graph = new_graph(["input"], ["output"], ops)
    x = jax.random.uniform(jax.random.PRNGKey(seed), shape, minval=0.5, maxval=1.5)
    state = jax.tree.map(jnp.abs, Model(graph).init(jax.random.PRNGKey(0), {"input": x}))
    return SubgraphModel(graph, {}, state, {"input": x})


def pairing_of(prop):
    ((_, per_input),) = prop.pairings.items()
    ((_, pairing),) = per_input.items()
    return pairing.mappings.tolist()


SOFTMAX = new_op("output", OpType.SOFTMAX, ["input"], input_kwargs={"axis": -1})
# The reference's test: a 3x3 conv on a (5, 5, 5) input, which flax (and so Model) runs as
# one unbatched (height, width, features) image.
CONV = new_op("output", OpType.CONV, ["input"],
              op_kwargs={"features": 10, "kernel_size": [3, 3]})


@pytest.mark.parametrize("abstract", [True, False])
def test_softmax_mixes_its_axis_into_every_output_dim(abstract):
    prop = linear.LinopProperty().infer(single_op_model(SOFTMAX, (5, 5, 5)), abstract=abstract)
    assert pairing_of(prop) == [[1, 0, 0], [0, 1, 0], [3, 3, 3]]


@pytest.mark.parametrize("abstract", [True, False])
def test_conv_pairing_and_how_it_relates_to_softmax(abstract):
    conv = linear.LinopProperty().infer(single_op_model(CONV, (5, 5, 5)), abstract=abstract)
    soft = linear.LinopProperty().infer(single_op_model(SOFTMAX, (5, 5, 5)), abstract=abstract)
    assert pairing_of(conv) == [[2, 0, 0], [0, 2, 0], [3, 3, 3]]
    assert soft.is_satisfied_by(conv)
    assert not conv.is_satisfied_by(soft)


def test_three_input_subgraph_pairs_each_add_with_its_two_branches(branches_model):
    pairings = linear.LinopProperty().infer(branches_model).pairings
    assert {o: sorted(p) for o, p in pairings.items()} == {
        "add0:0": ["dense0:0", "dense1:0"], "add1:0": ["dense1:0", "dense2:0"]}
    assert pairings["add0:0"]["dense0:0"].mappings.tolist() == np.eye(4, dtype=int).tolist()


def test_rewired_output_is_recorded_under_both_names(rewired):
    graph, constants, spec = rewired
    sm = SubgraphModel(graph, constants, None, {"input": jnp.ones((2, 32, 32, 3))}, spec)
    pairings = linear.LinopProperty().infer(sm).pairings
    assert set(pairings) == {"conv_layer1/gelu/1:0", "conv_layer1/relu:0"}
    assert pairings["conv_layer1/relu:0"] == pairings["conv_layer1/gelu/1:0"]
    assert linear.LinopProperty().infer(sm).verify(sm)


FIRST = {
    "relu": lambda n, i: new_op(n, OpType.RELU, [i]),
    "softmax": lambda n, i: new_op(n, OpType.SOFTMAX, [i]),
    "layer_norm": lambda n, i: new_op(n, OpType.LAYER_NORM, [i]),
    "batch_norm": lambda n, i: new_op(n, OpType.BATCH_NORM, [i]),
}
SECOND = {
    "conv": lambda n, i: new_op(n, OpType.CONV, [i],
                                op_kwargs={"features": 10, "kernel_size": [3, 3]}),
    "dense": lambda n, i: new_op(n, OpType.DENSE, [i], op_kwargs={"features": 10}),
}
PAIRS = [(a, b) for a, b in itertools.product(FIRST, SECOND)]
PAIRS += [(b, a) for a, b in PAIRS]
MAKERS = {**FIRST, **SECOND}


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_abstract_pairing_equals_concrete_on_two_op_graphs(first, second):
    ops = [MAKERS[first]("op0", "input"), MAKERS[second]("output", "op0")]
    sm = positive_model(ops, (5, 5, 5, 5))
    abstract = linear.LinopProperty().infer(sm)
    concrete = linear.LinopProperty().infer(sm, abstract=False)
    assert abstract.pairings == concrete.pairings
    assert abstract.is_satisfied_by(concrete) and concrete.is_satisfied_by(abstract)


CHAIN_OPS = {
    "relu": lambda n, i: new_op(n, OpType.RELU, [i]),
    "gelu": lambda n, i: new_op(n, OpType.GELU, [i]),
    "softmax": lambda n, i: new_op(n, OpType.SOFTMAX, [i]),
    "batch_norm": lambda n, i: new_op(n, OpType.BATCH_NORM, [i]),
    "conv3": lambda n, i: new_op(n, OpType.CONV, [i],
                                 op_kwargs={"features": 3, "kernel_size": 3}),
    "conv1s2": lambda n, i: new_op(n, OpType.CONV, [i],
                                   op_kwargs={"features": 4, "kernel_size": 1, "strides": 2}),
    "dense": lambda n, i: new_op(n, OpType.DENSE, [i], op_kwargs={"features": 3}),
    "avg_pool": lambda n, i: new_op(n, OpType.AVG_POOL, [i],
                                    input_kwargs={"window_shape": 2, "strides": 1}),
    "scale": lambda n, i: new_op(n, OpType.SCALAR_MUL, [i], input_kwargs={"const": 2.0}),
}


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(chain=st.lists(st.sampled_from(sorted(CHAIN_OPS)), min_size=1, max_size=3),
       size=st.sampled_from([4, 5, 7]))
def test_abstract_pairing_equals_concrete_on_random_chains(chain, size):
    names = [f"op{i}" for i in range(len(chain) - 1)] + ["output"]
    inputs = ["input"] + names[:-1]
    ops = [CHAIN_OPS[kind](n, i) for kind, n, i in zip(chain, names, inputs, strict=True)]
    sm = positive_model(ops, (2, size, size, 3))
    assert (linear.LinopProperty().infer(sm).pairings
            == linear.LinopProperty().infer(sm, abstract=False).pairings)


def test_pairing_cache_distinguishes_kwarg_values():
    """Two convs that differ only in kernel size must not share a cached pairing."""
    conv1 = new_op("output", OpType.CONV, ["input"], op_kwargs={"features": 4, "kernel_size": 1})
    conv3 = new_op("output", OpType.CONV, ["input"], op_kwargs={"features": 4, "kernel_size": 3})
    p1 = pairing_of(linear.LinopProperty().infer(single_op_model(conv1, (2, 6, 6, 3))))
    p3 = pairing_of(linear.LinopProperty().infer(single_op_model(conv3, (2, 6, 6, 3))))
    assert p1[1][1] == M.ONE_TO_ONE and p3[1][1] == M.MANY_TO_ONE


def test_pairing_algebra():
    a = Pairing([[1, 0], [0, 3]])
    assert a.join(Pairing([[2, 0], [0, 0]])) == Pairing([[2, 0], [0, 3]])
    assert a.compose(Pairing([[0, 1], [2, 0]])) == Pairing([[0, 1], [3, 3]])
    with pytest.raises(ValueError):
        a.join(Pairing([[1]]))
    with pytest.raises(ValueError):
        a.compose(Pairing([[1, 0, 0]]))
    with pytest.raises(ValueError):
        Pairing([[4]])


def test_mutation_and_distance(branches_model):
    prop = linear.LinopProperty(p=0.5).infer(branches_model)
    assert prop.mutate(11).pairings.keys() == prop.mutate(11).pairings.keys()
    satisfied = {prop.mutate(seed).is_satisfied_by(prop) for seed in range(10)}
    assert satisfied == {True}  # dropping entries only relaxes the target
    emptied = prop.mutate(0)
    emptied.pairings = {}
    assert prop.distance_from(emptied) == 1.0
    assert not prop.is_satisfied_by(emptied)
    wrong_rank = linear.LinopProperty(pairings={"add0:0": {"dense0:0": Pairing([[1]])}})
    with pytest.raises(ValueError, match="different ranks"):
        prop.distance_from(wrong_rank)
    assert prop.verify(branches_model)
    with pytest.raises(ValueError, match="same kind"):
        prop.distance_from(depth.DepthProperty())
