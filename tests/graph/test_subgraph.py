"""Seed-derived subgraph tests (CifarNet rewiring, ResNet18 multi-input/output) and weight
inheritance."""

import copy

import jax
import jax.numpy as jnp
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode, inherit_params, replace_subgraph
from nas.zoo import cnn, resnetv1


def rewire_spec():
    return [
        SubgraphNode(new_op("conv_layer1/conv/1", OpType.CONV, ["conv_layer0/avg_pool"],
                            op_kwargs={"features": 64, "kernel_size": [1, 1]})),
        SubgraphNode(new_op("conv_layer1/gelu/1", OpType.GELU, ["conv_layer1/conv/1"]),
                     output_names=["conv_layer1/relu"]),
    ]


def params_of(graph, constants, x=None):
    x = jnp.ones((1, 32, 32, 3)) if x is None else x
    return Model(graph, constants).init(jax.random.PRNGKey(0), x)


def test_replace_subgraph_cifarnet():
    graph, constants, _ = cnn.CifarNet()
    original = copy.deepcopy(graph)
    new = replace_subgraph(graph, rewire_spec())
    assert graph == original
    names = [op.name for op in new.ops]
    assert "conv_layer1/conv" not in names and "conv_layer1/relu" not in names
    assert names.index("conv_layer1/gelu/1") < names.index("conv_layer1/avg_pool")
    assert new.op("conv_layer1/avg_pool").input_names == ["conv_layer1/gelu/1:0"]
    state = params_of(graph, constants)
    new_state = params_of(new, constants)
    y = Model(new, constants).apply(new_state, jnp.ones((3, 32, 32, 3)))
    assert y.shape == (3, 10)

    def count(tree):
        return sum(a.size for a in jax.tree.leaves(tree))

    assert count(new_state) < count(state)


def test_inherit_params_checks_shapes():
    graph, constants, _ = cnn.CifarNet()
    new = replace_subgraph(graph, rewire_spec())
    old_params = params_of(graph, constants)["params"]
    new_params = params_of(new, constants)["params"]
    inherited, fresh = inherit_params(new_params, old_params)
    assert len(new_params) == len(inherited) + len(fresh)
    assert {"conv_layer0/conv", "fc/logits", "proj"} <= set(inherited)
    # conv_layer1 now has 64 channels, so fc/dense sees 4096 inputs instead of 8192.
    assert set(fresh) == {"conv_layer1/conv/1", "fc/dense"}
    assert inherited["proj"]["kernel"] is old_params["proj"]["kernel"]


def test_inherit_params_rejects_dtype_change():
    old = {"a": {"w": jnp.zeros((2,), jnp.float32)}}
    new = {"a": {"w": jnp.zeros((2,), jnp.bfloat16)}}
    assert inherit_params(new, old) == ({}, new)


@pytest.mark.slow
def test_replace_subgraph_resnet18_multi_input_output():
    graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    model = Model(graph, constants)
    state = model.init(jax.random.PRNGKey(0), jnp.ones((1, 32, 32, 3)))
    assert model.apply(state, jnp.ones((10, 32, 32, 3))).shape == (10, 10)
    spec = [
        SubgraphNode(new_op("subgraph/conv0", OpType.CONV, ["resnet11/skip/relu1"],
                            op_kwargs={"features": 64, "kernel_size": [1, 1]})),
        SubgraphNode(new_op("subgraph/gelu1", OpType.GELU, ["subgraph/conv0"]),
                     output_names=["resnet_stride1_filtermul1_basic12/relu2"]),
    ]
    new = replace_subgraph(graph, spec)
    assert len(graph.ops) == len(new.ops) + 1
    new_model = Model(new, constants)
    new_state = new_model.init(jax.random.PRNGKey(0), jnp.ones((1, 32, 32, 3)))
    assert new_model.apply(new_state, jnp.ones((10, 32, 32, 3))).shape == (10, 10)


def test_self_mapping_spec_leaves_graph_unchanged():
    graph, _, _ = cnn.CifarNet()
    spec = [SubgraphNode(copy.deepcopy(graph.ops[4]), ["conv_layer1/conv"])]
    assert replace_subgraph(graph, spec) == graph


def test_replace_subgraph_errors():
    graph, _, _ = cnn.CifarNet()
    bad_input = [SubgraphNode(new_op("x", OpType.RELU, ["ghost"]), ["conv_layer1/relu"])]
    with pytest.raises(ValueError):
        replace_subgraph(graph, bad_input)
    with pytest.raises(ValueError, match="SubgraphNode"):
        replace_subgraph(graph, [new_op("x", OpType.RELU, ["proj"])])
    with pytest.raises(ValueError, match="output_names has 2 entries"):
        SubgraphNode(new_op("x", OpType.RELU, ["proj"]), ["a", "b"])


def test_subgraph_model_three_models():
    graph, constants, _ = cnn.CifarNet()
    spec = rewire_spec()
    new = replace_subgraph(graph, spec)
    x = {"input": jnp.ones((2, 32, 32, 3))}
    state = Model(new, constants).init(jax.random.PRNGKey(0), x)
    sm = SubgraphModel(new, constants, state, x, spec)
    assert sm.input_names == ["conv_layer0/avg_pool:0"]
    assert sm.output_names == ["conv_layer1/gelu/1:0"]
    inputs = sm.get_default_subg_inputs()
    assert inputs["conv_layer0/avg_pool:0"].shape == (2, 16, 16, 64)
    outputs = sm.get_default_subg_outputs()
    assert outputs["conv_layer1/gelu/1:0"].shape == (2, 16, 16, 64)
    direct = sm.get_subg_outputs(x)["conv_layer1/gelu/1:0"]
    assert jnp.allclose(direct, outputs["conv_layer1/gelu/1:0"])
    abstract = SubgraphModel(new, constants, None, x, spec)
    with pytest.raises(ValueError, match="without state"):
        abstract.get_default_subg_outputs()


def test_subgraph_model_whole_graph():
    graph = new_graph(["input"], ["out"], [new_op("out", OpType.RELU, ["input"])])
    sm = SubgraphModel(graph, {}, None, {"input": jnp.ones((1, 2))})
    assert sm.input_names == ["input:0"] and sm.output_names == ["out:0"]
    assert sm.subg_model is sm.subg_outputs_model


@pytest.mark.parametrize("spec, message", [
    (lambda: [SubgraphNode(new_op("x", OpType.RELU, ["proj"]), ["nope"])],
     "node 'x' replaces 'nope:0', which is not a tensor of the graph"),
    (lambda: [SubgraphNode(new_op("x", OpType.RELU, ["proj"]), ["conv_layer0/relu:1"])],
     "node 'x' replaces 'conv_layer0/relu:1', which is not a tensor"),
    (lambda: [SubgraphNode(new_op("x", OpType.RELU, ["proj"]), [None])],
     "replaces no tensor of the graph"),
    (lambda: [SubgraphNode(new_op("x", OpType.RELU, ["proj"]), ["conv_layer0/relu"]),
              SubgraphNode(new_op("y", OpType.GELU, ["proj"]), ["conv_layer0/relu"])],
     "nodes 'x' and 'y' both replace tensor 'conv_layer0/relu:0'"),
    (lambda: [SubgraphNode(new_op("x", OpType.RELU, ["nope"]), ["conv_layer1/relu"])],
     "subgraph op 'x' reads 'nope:0', which neither the graph nor an earlier"),
])
def test_replace_subgraph_refuses_specs_it_would_splice_wrongly(spec, message):
    graph, _, _ = cnn.CifarNet()
    with pytest.raises(ValueError, match=message):
        replace_subgraph(graph, spec())


def test_a_new_op_with_the_name_of_a_graph_op_replaces_it():
    # Both used to be dropped silently: the first rewired to the old 'proj' CONV, the second
    # returned the parent unchanged.
    graph, _, _ = cnn.CifarNet()
    child = replace_subgraph(graph, [
        SubgraphNode(new_op("proj", OpType.RELU, ["input"]), ["conv_layer0/conv"])])
    assert [(op.name, op.type) for op in child.ops[:2]] == [
        ("proj", OpType.RELU), ("conv_layer0/relu", OpType.RELU)]
    assert child.op("conv_layer0/relu").input_names == ["proj:0"]
    child = replace_subgraph(graph, [
        SubgraphNode(new_op("conv_layer0/relu", OpType.GELU, ["conv_layer0/conv"]),
                     ["conv_layer0/relu"])])
    assert child.op("conv_layer0/relu").type is OpType.GELU
    assert len(child.ops) == len(graph.ops)


def test_unchanged_copies_of_graph_ops_may_keep_their_names():
    graph, _, _ = cnn.CifarNet()
    copies = [SubgraphNode(copy.deepcopy(graph.op("conv_layer0/conv")), []),
              SubgraphNode(copy.deepcopy(graph.op("conv_layer0/relu")), ["conv_layer0/relu"])]
    assert replace_subgraph(graph, copies) == graph


def test_wrong_argument_kinds_are_value_errors():
    graph, _, _ = cnn.CifarNet()
    node = SubgraphNode(new_op("x", OpType.RELU, ["proj"]), ["conv_layer0/relu"])
    with pytest.raises(ValueError, match="needs a Graph"):
        replace_subgraph("g", [node])
    with pytest.raises(ValueError, match="must be a list of SubgraphNode"):
        replace_subgraph(graph, None)
    with pytest.raises(ValueError, match="needs an Op"):
        SubgraphNode("x", ["a"])
    with pytest.raises(ValueError, match="output_names must be a list"):
        SubgraphNode(new_op("x", OpType.RELU, ["proj"]), "conv_layer0/relu")
    with pytest.raises(ValueError, match="old_params must be a dict"):
        inherit_params({}, [1])
