"""The sequential synthesizer base: width bookkeeping, spec construction, input checks."""

import jax.numpy as jnp
import pytest

from nas.graph import OpType, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.properties import shape
from nas.synthesis.sequential import AbstractSequentialSynthesizer
from nas.zoo import cnn


class _Sequential(AbstractSequentialSynthesizer):
    def synthesize(self):
        raise NotImplementedError


def _cifar_subgraph(features="S:-1*2", input_shape=(5, 32, 32, 10)):
    graph, constants, _ = cnn.CifarNet()
    spec = [
        SubgraphNode(new_op("conv_layer1/conv", OpType.CONV, ["conv_layer0/avg_pool"],
                            op_kwargs={"features": features, "kernel_size": [1, 1]})),
        SubgraphNode(new_op("conv_layer1/relu", OpType.RELU, ["conv_layer1/conv"]),
                     output_names=["conv_layer1/relu"]),
    ]
    graph = replace_subgraph(graph, spec)
    model = SubgraphModel(graph, constants, None, {"input": jnp.zeros(input_shape)}, spec)
    return model, spec


def test_output_features_mul_from_shape_property():
    model, _ = _cifar_subgraph()
    prop = shape.ShapeProperty().infer(model)
    syn = _Sequential([(model, [prop])], 0)
    assert syn.output_features_mul == 2
    assert syn.output_features_div == 1
    assert syn.input_name == "conv_layer0/avg_pool:0"
    assert syn.output_name == "conv_layer1/relu:0"


def test_output_features_div_and_const():
    model, _ = _cifar_subgraph(features="S:-1%2")
    syn = _Sequential([(model, [shape.ShapeProperty().infer(model)])], 0)
    assert (syn.output_features_mul, syn.output_features_div) == (1, 2)
    model, _ = _cifar_subgraph(features=48)
    syn = _Sequential([(model, [shape.ShapeProperty().infer(model)])], 0)
    assert syn.output_features_const == 48


def test_get_output_features_counts_each_factor_once():
    model, _ = _cifar_subgraph()
    syn = _Sequential([(model, [shape.ShapeProperty().infer(model)])], 0)
    conv = lambda f: new_op("c", OpType.CONV, ["x"], op_kwargs={"features": f, "kernel_size": 1})
    assert syn.get_output_features([conv("S:-1")]) == "S:-1*2"
    assert syn.get_output_features([conv("S:-1*4"), conv("S:-1*4")]) == "S:-1%2"
    assert syn.get_output_features([conv("S:-1*2"), conv("S:-1")]) == "S:-1"
    assert syn.get_output_features([conv(64), conv("S:-1")]) is None


def test_make_subgraph_spec_chains_and_renames():
    model, _ = _cifar_subgraph()
    syn = _Sequential([(model, [shape.ShapeProperty().infer(model)])], 0)
    ops = [new_op("gen0/conv", OpType.CONV, ["inputs"],
                  op_kwargs={"features": "S:-1", "kernel_size": 3}),
           new_op("gen0/relu", OpType.RELU, ["inputs"])]
    spec = syn.make_subgraph_spec(ops, adjust_features=True)
    assert [n.op.name for n in spec] == ["gen0/conv/0", "gen0/relu/1"]
    assert spec[0].op.input_names == ["conv_layer0/avg_pool:0"]
    assert spec[1].op.input_names == ["gen0/conv/0:0"]
    assert spec[1].output_names == ["conv_layer1/relu:0"]
    assert spec[0].op.op_kwargs["features"] == "S:-1*2"
    assert ops[0].op_kwargs["features"] == "S:-1"  # the caller's ops are not modified


def test_two_input_spec_is_rejected():
    graph, constants, _ = cnn.CifarNet()
    # A MUL of the block input with an earlier tensor: structure only, nothing runs.
    spec = [
        SubgraphNode(new_op("a", OpType.RELU, ["conv_layer0/avg_pool"])),
        SubgraphNode(new_op("b", OpType.MUL, ["a", "conv_layer0/relu"]),
                     output_names=["conv_layer1/relu"]),
    ]
    graph = replace_subgraph(graph, spec)
    model = SubgraphModel(graph, constants, None, {"input": jnp.zeros((1, 32, 32, 3))}, spec)
    assert len(model.input_names) == 2
    with pytest.raises(ValueError, match="needs exactly one input"):
        _Sequential([(model, [])], 0)
