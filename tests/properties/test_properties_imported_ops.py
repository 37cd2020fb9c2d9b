"""Shape, depth and linear pairing on a graph that uses every op type added for imported
models, with a CONCAT of two branches and a squeeze-excite MUL that broadcasts."""

import jax
import jax.numpy as jnp
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.properties import depth, linear, shape
from nas.properties.fingerprint import fingerprint_graph

SHAPE = (2, 6, 6, 3)


def new_ops_graph():
    """relu6 and a conv -> leaky relu meet at a CONCAT; then hard swish, elu, a
    squeeze-excite scale (MEAN keepdims, MUL), tanh and an exact GELU."""
    conv = {"features": 4, "kernel_size": (3, 3)}
    ops = [
        new_op("r6", OpType.RELU6, ["input"]),
        new_op("conv", OpType.CONV, ["input"], op_kwargs=conv),
        new_op("lr", OpType.LEAKY_RELU, ["conv"], input_kwargs={"negative_slope": 0.1}),
        new_op("cat", OpType.CONCAT, ["r6", "lr"], input_kwargs={"axis": -1}),
        new_op("hs", OpType.HARD_SWISH, ["cat"]),
        new_op("el", OpType.ELU, ["hs"], input_kwargs={"alpha": 0.5}),
        new_op("se", OpType.MEAN, ["el"], input_kwargs={"axis": (1, 2), "keepdims": True}),
        new_op("scaled", OpType.MUL, ["el", "se"]),
        new_op("th", OpType.TANH, ["scaled"]),
        new_op("output", OpType.GELU, ["th"], input_kwargs={"approximate": False}),
    ]
    return new_graph(["input"], ["output"], ops)


def positive_model(graph, spec=None):
    """Positive weights and inputs in (0.5, 1.5): no activation sits at a kink or a flat
    part, so concrete pairings are those of the structure."""
    x = jax.random.uniform(jax.random.PRNGKey(1), SHAPE, minval=0.5, maxval=1.5)
    state = jax.tree.map(lambda a: jnp.abs(a) * 0.1,
                         Model(graph).init(jax.random.PRNGKey(0), {"input": x}))
    return SubgraphModel(graph, {}, state, {"input": x}, spec)


def concat_spec(graph):
    """The two branches and their CONCAT, exported where the CONCAT was."""
    ops = [graph.op(n) for n in ("r6", "conv", "lr")]
    return [SubgraphNode(op, []) for op in ops] + [SubgraphNode(graph.op("cat"), ["cat:0"])]


@pytest.mark.parametrize("abstract", [True, False])
def test_shapes_of_the_whole_graph_and_the_concat_subgraph(abstract):
    graph = new_ops_graph()
    sm = positive_model(graph)
    prop = shape.ShapeProperty().infer(sm, abstract=abstract, intermediates=True)
    assert prop.output_shapes["cat:0"] == (2, 6, 6, 7)
    assert prop.output_shapes["se:0"] == (2, 1, 1, 7)
    assert prop.output_shapes["output"] == (2, 6, 6, 7)
    sub = shape.ShapeProperty().infer(positive_model(graph, concat_spec(graph)),
                                      abstract=abstract)
    assert sub.input_shapes == {"input:0": SHAPE}
    assert sub.output_shapes == {"cat:0": (2, 6, 6, 7)}


def test_depth_counts_the_new_activations_as_nonlinear_and_concat_as_linear():
    graph = new_ops_graph()
    whole = depth.DepthProperty().infer(SubgraphModel(graph, {}, None, {}))
    # input(NL) conv(L) lr(NL) cat(L) hs el(NL) se/scaled(L) th gelu(NL)
    assert whole.depth_map == {"input:0": {"output:0": 6}}
    sub = depth.DepthProperty().infer(SubgraphModel(graph, {}, None, {}, concat_spec(graph)))
    assert sub.depth_map == {"input:0": {"cat:0": 3}}


def test_every_op_type_but_none_has_a_depth_class():
    for op_type in OpType:
        if op_type is not OpType.NONE:
            depth.is_nonlinear(new_op("op", op_type, []))
    with pytest.raises(ValueError, match="'op'.*no linear/non-linear class"):
        depth.is_nonlinear(new_op("op", OpType.NONE, []))


def test_abstract_pairing_equals_concrete_with_concat_and_broadcast_mul():
    graph = new_ops_graph()
    for spec in (None, concat_spec(graph)):
        sm = positive_model(graph, spec)
        abstract = linear.LinopProperty().infer(sm)
        concrete = linear.LinopProperty().infer(sm, abstract=False)
        assert abstract.pairings == concrete.pairings
        assert abstract.pairings


@pytest.mark.parametrize("sizes", [(3, 4), (4, 3), (1, 5), (5, 1, 2)])
def test_concat_pairing_is_exact_for_uneven_inputs(sizes):
    """The centre output element lies in whichever input the sizes put it in: the cached
    pairing keeps the concatenated axis whole."""
    names = [f"x{i}" for i in range(len(sizes))]
    graph = new_graph(names, ["cat"], [new_op("cat", OpType.CONCAT, names,
                                              input_kwargs={"axis": 1})])
    xs = {n: jnp.ones((3, s, 5)) for n, s in zip(names, sizes, strict=True)}
    sm = SubgraphModel(graph, {}, {}, xs)
    assert (linear.LinopProperty().infer(sm).pairings
            == linear.LinopProperty().infer(sm, abstract=False).pairings)


def test_fingerprint_reads_an_explicit_default_as_absent():
    def graph(**kwargs):
        return new_graph(["input"], ["y"], [new_op("y", OpType.GELU, ["input"],
                                                   input_kwargs=kwargs)])

    plain = fingerprint_graph(graph(), {}, {"input": SHAPE})
    assert fingerprint_graph(graph(approximate=True), {}, {"input": SHAPE}) == plain
    assert fingerprint_graph(graph(approximate=False), {}, {"input": SHAPE}) != plain
