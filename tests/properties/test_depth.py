import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.subgraph import SubgraphModel
from nas.properties import depth, shape


def whole(graph, constants):
    return SubgraphModel(graph, constants, None, {})


def test_rewired_cifarnet_subgraph_has_depth_one_to_both_names(rewired):
    graph, constants, spec = rewired
    depth_map = depth.DepthProperty().infer(SubgraphModel(graph, constants, {}, {}, spec)).depth_map
    assert depth_map == {
        "conv_layer0/avg_pool:0": {"conv_layer1/gelu/1:0": 1, "conv_layer1/relu:0": 1}
    }


def test_three_inputs_reach_their_adds_at_depth_two(branches_model):
    depth_map = depth.DepthProperty().infer(branches_model).depth_map
    assert depth_map == {
        "dense0:0": {"add0:0": 2},
        "dense1:0": {"add0:0": 2, "add1:0": 2},
        "dense2:0": {"add1:0": 2},
    }


def test_whole_cifarnet_counts_seven_alternations(cifarnet):
    prop = depth.DepthProperty().infer(whole(*cifarnet))
    assert prop.depth_map == {"input:0": {"fc/logits:0": 7}}


def test_deeper_graph_satisfies_a_truncated_one_but_not_a_missing_output(cifarnet):
    graph, constants = cifarnet
    ops = [op for op in graph.ops[:-1]]
    truncated = new_graph(graph.input_names, ["fc/logits"],
                          ops[:-1] + [new_op("fc/logits", OpType.RELU, ["fc/dense"])])
    short = depth.DepthProperty().infer(whole(truncated, constants))
    full = depth.DepthProperty().infer(whole(graph, constants))
    assert short.depth_map == {"input:0": {"fc/logits:0": 6}}
    assert short.is_satisfied_by(full)
    assert not full.is_satisfied_by(short)
    other_output = new_graph(graph.input_names, ["fc/relu"], graph.ops[:-1])
    assert not full.is_satisfied_by(depth.DepthProperty().infer(whole(other_output, constants)))


def test_identity_is_transparent_and_none_cuts_dependence():
    ops = [
        new_op("dense", OpType.DENSE, ["input"], op_kwargs={"features": 4}),
        new_op("id", OpType.IDENTITY, ["dense"]),
        new_op("relu", OpType.RELU, ["id"]),
        new_op("cut", OpType.NONE, ["input"]),
        new_op("out", OpType.ADD, ["relu", "cut"]),
    ]
    graph = new_graph(["input"], ["out"], ops)
    assert depth.DepthProperty().infer(whole(graph, {})).depth_map == {"input:0": {"out:0": 3}}


def test_mutation_with_p_one_moves_by_delta_max_and_is_seeded(cifarnet):
    prop = depth.DepthProperty(p=1.0, delta_max=5).infer(whole(*cifarnet))
    seen = {prop.mutate(seed).depth_map["input:0"]["fc/logits:0"] for seed in range(20)}
    assert seen == {2, 12}
    assert prop.mutate(3).depth_map == prop.mutate(3).depth_map
    assert prop.depth_map == {"input:0": {"fc/logits:0": 7}}  # mutate copies


def test_mutated_depths_are_not_always_satisfied(cifarnet):
    prop = depth.DepthProperty(p=0.5).infer(whole(*cifarnet))
    results = {prop.mutate(seed).is_satisfied_by(prop) for seed in range(30)}
    assert results == {True, False}


def test_distance_needs_same_kind_and_an_inferred_map(cifarnet):
    prop = depth.DepthProperty().infer(whole(*cifarnet))
    with pytest.raises(ValueError, match="same kind"):
        prop.distance_from(shape.ShapeProperty())
    with pytest.raises(ValueError, match="infer"):
        depth.DepthProperty().distance_from(prop)
    with pytest.raises(ValueError, match="infer"):
        depth.DepthProperty().mutate(0)


def test_an_inferred_property_owns_its_tables_and_keeps_its_settings(branches_model):
    shared = {"x": (1, 4)}
    target = depth.DepthProperty(p=0.5, delta_max=3, input_values={"a": shared, "b": shared})
    target = target.infer(branches_model)
    again = target.infer(branches_model)  # replaces the table, copies the rest
    assert (again.p, again.delta_max, again.depth_map) == (0.5, 3, target.depth_map)
    assert again.depth_map is not target.depth_map
    assert again.input_values == target.input_values
    assert again.input_values is not target.input_values
    assert again.input_values["a"] is again.input_values["b"]  # shared stays shared
    mutated = target.mutate(0)
    mutated.depth_map.clear()
    assert target.depth_map and again.depth_map
