import jax
import jax.numpy as jnp
import pytest

from nas.graph import Model, OpType, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.properties import MaxSizeError, graph_shapes, shape
from nas.properties.tensor_shapes import GraphShapes

BATCH5 = {"input": jnp.ones((5, 32, 32, 3))}


def test_rewired_subgraph_has_one_input_and_two_output_names(rewired):
    graph, constants, spec = rewired
    state = Model(graph, constants).init(jax.random.PRNGKey(0), BATCH5)
    prop = shape.ShapeProperty().infer(SubgraphModel(graph, constants, state, BATCH5, spec))
    assert prop.input_shapes == {"conv_layer0/avg_pool:0": (5, 16, 16, 64)}
    assert prop.output_shapes == {"conv_layer1/gelu/1:0": (5, 16, 16, 64),
                                  "conv_layer1/relu:0": (5, 16, 16, 64)}


def test_whole_cifarnet_shapes_and_intermediates(cifarnet):
    sm = SubgraphModel(*cifarnet, None, BATCH5)
    prop = shape.ShapeProperty().infer(sm)
    assert prop.input_shapes == {"input": (5, 32, 32, 3)}
    assert prop.output_shapes == {"fc/logits": (5, 10)}
    assert len(shape.ShapeProperty().infer(sm, intermediates=True).output_shapes) == 11


@pytest.mark.parametrize("abstract", [True, False])
def test_max_size_boundary_is_the_first_conv_output(cifarnet, abstract):
    sm = SubgraphModel(*cifarnet, None, BATCH5)
    with pytest.raises(MaxSizeError, match="max_size"):
        shape.ShapeProperty().infer(sm, abstract=abstract, max_size=327679)
    assert isinstance(MaxSizeError("x"), ValueError)
    shape.ShapeProperty().infer(sm, abstract=abstract, max_size=327680)


def test_abstract_equals_concrete_and_shape_only_inputs_work(rewired):
    graph, constants, spec = rewired
    concrete = shape.ShapeProperty().infer(
        SubgraphModel(graph, constants, None, BATCH5, spec), abstract=False)
    spec_inputs = {"input": jax.ShapeDtypeStruct((5, 32, 32, 3), jnp.float32)}
    for inputs in (spec_inputs, {"input": (5, 32, 32, 3)}):
        sm = SubgraphModel(graph, constants, None, inputs, spec)
        abstract = shape.ShapeProperty().infer(sm)
        assert (abstract.input_shapes, abstract.output_shapes) == (
            concrete.input_shapes, concrete.output_shapes)


def test_parent_shapes_are_reused_for_a_candidate(cifarnet, rewired):
    graph, constants = cifarnet
    parent = graph_shapes(graph, constants, BATCH5)
    assert isinstance(parent, GraphShapes) and parent.shape("fc/logits") == (5, 10)
    assert graph_shapes(graph, constants, {"input": (5, 32, 32, 3)}) is parent  # cached
    child, _, spec = rewired
    sm = SubgraphModel(child, constants, None, BATCH5, spec)
    with_parent = shape.ShapeProperty().infer(sm, shapes=parent)
    assert with_parent == shape.ShapeProperty().infer(sm)
    assert "conv_layer1/conv/1:0" not in parent  # extending does not touch the parent


def test_inferred_property_is_satisfied_by_its_own_graph(rewired):
    graph, constants, spec = rewired
    sm = SubgraphModel(graph, constants, None, BATCH5, spec)
    prop = shape.ShapeProperty().infer(sm)
    assert prop.verify(sm)
    assert prop.distance_from(prop) == 0


def test_distance_counts_differing_dims_and_allows_pooling_factors():
    target = shape.ShapeProperty(input_shapes={"x": (2, 8, 8, 3)},
                                 output_shapes={"y": (2, 4, 4, 16)})
    same_but_wider = shape.ShapeProperty(input_shapes={"x": (2, 8, 8, 3)},
                                         output_shapes={"y": (2, 8, 8, 32), "extra": (1,)})
    assert target.distance_from(same_but_wider) == pytest.approx(3 / 4)
    for bad_out in ({"y": (3, 4, 4, 16)}, {"y": (2, 4, 16)}, {"y": (2, 8, 12, 16)}, {}):
        other = shape.ShapeProperty(input_shapes={"x": (2, 8, 8, 3)}, output_shapes=bad_out)
        with pytest.raises(ValueError):
            target.distance_from(other)
    with pytest.raises(ValueError, match="input 'x' has shape"):
        target.distance_from(shape.ShapeProperty(input_shapes={"x": (2, 8, 8, 4)},
                                                 output_shapes={"y": (2, 4, 4, 16)}))


def test_mutation_drops_outputs_deterministically(rewired):
    graph, constants, spec = rewired
    prop = shape.ShapeProperty(p=0.5).infer(SubgraphModel(graph, constants, None, BATCH5, spec))
    assert prop.mutate(7) == prop.mutate(7)
    sizes = {len(prop.mutate(seed).output_shapes) for seed in range(20)}
    assert sizes == {0, 1, 2}
    assert shape.ShapeProperty(p=1.0).infer(
        SubgraphModel(graph, constants, None, BATCH5, spec)).mutate(0).output_shapes == {}


def test_bad_inputs_raise_value_errors(cifarnet, rewired):
    graph, constants = cifarnet
    with pytest.raises(ValueError, match="p must be"):
        shape.ShapeProperty(p=1.5)
    with pytest.raises(ValueError, match="SubgraphModel"):
        shape.ShapeProperty().infer(graph)
    with pytest.raises(ValueError, match="graph inputs"):
        shape.ShapeProperty().infer(SubgraphModel(graph, constants, None, {}))
    # A candidate whose add joins tensors of different shapes is malformed.
    add = new_op("bad_add", OpType.ADD, ["conv_layer0/avg_pool", "conv_layer1/relu"])
    spec = [SubgraphNode(add, ["conv_layer1/avg_pool"])]
    child = replace_subgraph(graph, spec)
    with pytest.raises(ValueError, match="bad_add"):
        shape.ShapeProperty().infer(SubgraphModel(child, constants, None, BATCH5, spec))
    # A graph corrupted after construction: an op reads a tensor nobody produces.
    broken, _, spec = rewired
    broken.ops[-1].input_names = ["nowhere:0"]
    with pytest.raises(ValueError, match="nowhere"):
        shape.ShapeProperty().infer(SubgraphModel(broken, constants, None, BATCH5, spec))

