"""Graphs shared by the property tests: CifarNet, a rewired CifarNet and a three-branch graph."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.zoo import cnn


@pytest.fixture(scope="session")
def cifarnet():
    graph, constants, _ = cnn.CifarNet()
    return graph, constants


def rewire_spec() -> list[SubgraphNode]:
    """A 1x1 conv on conv_layer0's output, then a gelu that takes over conv_layer1/relu."""
    conv = new_op("conv_layer1/conv/1", OpType.CONV, ["conv_layer0/avg_pool"],
                  op_kwargs={"features": 64, "kernel_size": [1, 1]})
    gelu = new_op("conv_layer1/gelu/1", OpType.GELU, ["conv_layer1/conv/1"])
    return [SubgraphNode(conv), SubgraphNode(gelu, output_names=["conv_layer1/relu"])]


@pytest.fixture()
def rewired(cifarnet):
    """(graph with the rewired subgraph, constants, spec)."""
    graph, constants = cifarnet
    spec = rewire_spec()
    return replace_subgraph(graph, spec), constants, spec


def branches_graph():
    """Three dense branches; add0 joins branches 0 and 1, add1 joins branches 1 and 2."""
    ops = []
    for i in range(3):
        ops.append(new_op(f"dense{i}", OpType.DENSE, ["input"], op_kwargs={"features": 32}))
        ops.append(new_op(f"relu{i}", OpType.RELU, [f"dense{i}"]))
    ops.append(new_op("add0", OpType.ADD, ["relu0", "relu1"]))
    ops.append(new_op("add1", OpType.ADD, ["relu1", "relu2"]))
    return new_graph(["input"], ["add0", "add1"], ops)


def branches_spec() -> list[SubgraphNode]:
    """The relus and adds of `branches_graph` as a subgraph with three inputs."""
    spec = [SubgraphNode(new_op(f"relu{i}", OpType.RELU, [f"dense{i}"])) for i in range(3)]
    spec.append(SubgraphNode(new_op("add0", OpType.ADD, ["relu0", "relu1"]), ["add0"]))
    spec.append(SubgraphNode(new_op("add1", OpType.ADD, ["relu1", "relu2"]), ["add1"]))
    return spec


@pytest.fixture()
def branches_model():
    spec = branches_spec()
    graph = replace_subgraph(branches_graph(), spec)
    return SubgraphModel(graph, {}, {}, {"input": jnp.ones((10, 32, 32, 3))}, spec)
