"""Random malformed graphs and specs must yield ValueError and nothing else."""

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nas.graph import Graph, Op, OpType, new_graph, new_op, validate
from nas.graph.serialize import graph_to_dict
from nas.graph.subgraph import SubgraphNode, replace_subgraph
from nas.zoo import cnn

NAMES = st.sampled_from(["input", "a", "b", "c", "a:1", "x*y", "p%q", "", "conv", "ghost"])
VALUES = st.one_of(
    st.integers(-3, 64), st.floats(allow_nan=True), st.none(), st.booleans(),
    st.sampled_from(["S:-1", "S:-1*2", "S:-1%0", "S:a:-1", "K:k", "K:", "I:zeros", "I:bogus",
                     "B", "SAME", "S:1:2:3", "S:-1*2*3", "Q:1", "S:ghost:0", "12x"]),
    st.lists(st.integers(-2, 5), max_size=3),
)
KWARG_KEYS = st.sampled_from(["features", "kernel_size", "strides", "rate", "axis", "new_shape",
                              "window_shape", "const", "sum", "axes", "bogus", "num_heads",
                              "use_bias", "init_fn", "shape", "layer_drop_rate", "padding"])
KWARGS = st.dictionaries(KWARG_KEYS, VALUES, max_size=3)
OP_TYPES = st.one_of(st.sampled_from(list(OpType)), st.sampled_from(["RELU", "bogus", 3]))


@st.composite
def raw_ops(draw):
    return Op(name=draw(NAMES), type=draw(OP_TYPES),
              input_names=draw(st.lists(NAMES, max_size=3)),
              input_kwargs=draw(KWARGS), op_kwargs=draw(KWARGS),
              num_outputs=draw(st.sampled_from([1, 1, 2, 0])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(raw_ops(), max_size=4), outputs=st.lists(NAMES, max_size=2))
def test_random_graphs_validate_or_raise_value_error(ops, outputs):
    graph = Graph(["input"], outputs, ops)
    try:
        validate(graph)
    except ValueError:
        return
    # A graph that validates must also serialize.
    graph_to_dict(graph)


@settings(max_examples=200, deadline=None)
@given(name=NAMES, op_type=OP_TYPES, inputs=st.lists(NAMES, max_size=3), kwargs=KWARGS,
       op_kwargs=KWARGS)
def test_random_new_op_and_graph(name, op_type, inputs, kwargs, op_kwargs):
    try:
        op = new_op(name, op_type, inputs, kwargs, op_kwargs)
        new_graph(["input"], [op.name], [op])
    except ValueError:
        pass


CIFAR = cnn.CifarNet()[0]
TENSORS = st.sampled_from(["proj", "conv_layer0/conv", "conv_layer1/relu", "fc/relu",
                           "fc/logits", "ghost", "input", "conv_layer1/avg_pool"])


@settings(max_examples=150, deadline=None)
@given(specs=st.lists(st.tuples(NAMES, OP_TYPES, st.lists(TENSORS, max_size=2), KWARGS,
                                st.lists(st.one_of(st.none(), TENSORS), max_size=2)),
                      max_size=3))
def test_random_specs_replace_or_raise_value_error(specs):
    graph = copy.deepcopy(CIFAR)
    try:
        spec = [SubgraphNode(new_op(n, t, i, op_kwargs=k), o) for n, t, i, k, o in specs]
        replace_subgraph(graph, spec)
    except ValueError:
        pass
    assert graph == CIFAR
