"""Properties of graphs on unbatched inputs: a conv or pool whose kernel or window has one
entry per axis but the last is one example, as in flax and the reference (whose tests build
such graphs for the linear property). Abstract and concrete inference must agree with each
other and with what executing the graph gives."""

import jax
import jax.numpy as jnp
import pytest

from nas.graph import Model, OpType, canonical_name, new_graph, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.properties import depth, linear, shape

KEY = jax.random.PRNGKey(0)
M = linear.Pairing.Mapping


def chain(*ops):
    return new_graph(["input"], [ops[-1].name], list(ops))


CONV = new_op("conv", OpType.CONV, ["input"], op_kwargs={"features": 10, "kernel_size": (3, 3)})


def positive(graph, x):
    """Variables made positive so that no gradient cancels by chance."""
    return jax.tree.map(jnp.abs, Model(graph).init(KEY, x))


def test_conv_on_an_unbatched_image_builds_runs_and_infers():
    graph = chain(CONV)
    x = jax.random.uniform(KEY, (5, 5, 5), minval=0.5, maxval=1.5)
    variables = positive(graph, x)
    y = Model(graph).apply(variables, x)
    assert y.shape == (5, 5, 10)
    sm = SubgraphModel(graph, {}, variables, {"input": x})
    for abstract in (True, False):
        shapes = shape.ShapeProperty().infer(sm, abstract=abstract)
        assert shapes.input_shapes == {"input": (5, 5, 5)}
        assert shapes.output_shapes == {"conv": y.shape}
        assert depth.DepthProperty().infer(sm, abstract=abstract).depth_map == {
            "input:0": {"conv:0": 1}
        }
        (pairing,) = linear.LinopProperty().infer(sm, abstract=abstract).pairings["conv"].values()
        # Rows: input dims (height, width, features); columns: output dims. The 3x3 window
        # mixes neighbouring rows and columns; every input feature reaches every output.
        assert pairing.mappings.tolist() == [
            [M.MANY_TO_ONE, 0, 0],
            [0, M.MANY_TO_ONE, 0],
            [M.ALL_TO_ONE] * 3,
        ]


@pytest.mark.parametrize(
    "ops",
    [
        [
            CONV,
            new_op("relu", OpType.RELU, ["conv"]),
            new_op(
                "pool",
                OpType.AVG_POOL,
                ["relu"],
                input_kwargs={"window_shape": (2, 2), "strides": (1, 1)},
            ),
        ],
        [
            new_op("pool", OpType.AVG_POOL, ["input"], input_kwargs={"window_shape": (0, 2)}),
            new_op(
                "conv",
                OpType.CONV,
                ["pool"],
                op_kwargs={"features": 10, "kernel_size": (1, 3), "feature_group_count": 5},
            ),
        ],
        [
            new_op(
                "pool",
                OpType.AVG_POOL,
                ["input"],
                input_kwargs={"window_shape": (3, 3), "padding": "SAME"},
            ),
            new_op(
                "conv",
                OpType.CONV,
                ["pool"],
                op_kwargs={"features": 4, "kernel_size": (2, 2), "strides": (2, 2)},
            ),
        ],
    ],
)
def test_unbatched_chains_infer_abstractly_as_they_execute(ops):
    graph = chain(*ops)
    x = jax.random.uniform(KEY, (6, 7, 5), minval=0.5, maxval=1.5)
    variables = positive(graph, x)
    everything = Model(new_graph(["input"], [], graph.ops)).apply(variables, x)
    sm = SubgraphModel(graph, {}, variables, {"input": x})
    inferred = shape.ShapeProperty().infer(sm, intermediates=True)
    assert {canonical_name(n): s for n, s in inferred.output_shapes.items()} == {
        n: v.shape for n, v in everything.items()
    }
    assert (
        linear.LinopProperty().infer(sm).pairings
        == linear.LinopProperty().infer(sm, abstract=False).pairings
    )


def test_unbatched_subgraph_properties_agree_abstractly_and_concretely():
    graph = chain(
        CONV,
        new_op("relu", OpType.RELU, ["conv"]),
        new_op("pool", OpType.AVG_POOL, ["relu"], input_kwargs={"window_shape": (2, 2)}),
    )
    spec = [SubgraphNode(graph.ops[1]), SubgraphNode(graph.ops[2], output_names=["pool"])]
    graph = replace_subgraph(graph, spec)
    x = jax.random.uniform(KEY, (5, 5, 5), minval=0.5, maxval=1.5)
    sm = SubgraphModel(graph, {}, positive(graph, x), {"input": x}, spec)
    for prop in (shape.ShapeProperty(), depth.DepthProperty(), linear.LinopProperty()):
        abstract, concrete = prop.infer(sm), prop.infer(sm, abstract=False)
        assert abstract == concrete
        assert abstract.verify(sm, abstract=False)
    assert shape.ShapeProperty().infer(sm).output_shapes["pool:0"] == (4, 4, 10)
