"""A new op that replaces an op of its type and shapes starts from that op's weights,
so that a child of an imported model starts near its parent rather than far below it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from nas.graph import Model, OpType, new_op
from nas.graph.subgraph import SubgraphNode
from nas.mutation.warm_start import copy_replaced
from nas.zoo import cnn


def _parent():
    graph, constants, _ = cnn.CifarNet()
    variables = Model(graph, constants).init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))
    return graph, jax.tree.map(np.asarray, variables)


def test_a_same_shaped_replacement_copies_and_another_does_not():
    graph, variables = _parent()
    old = variables["params"]["conv_layer1/conv"]
    same = new_op("c1/0", OpType.CONV, ["conv_layer0/avg_pool:0"],
                  op_kwargs={"features": 128, "kernel_size": 3})
    wider = new_op("c1/1", OpType.CONV, ["conv_layer0/avg_pool:0"],
                   op_kwargs={"features": 128, "kernel_size": 5})
    rng = np.random.default_rng(0)
    child = {"params": {
        "c1/0": {"kernel": rng.normal(size=old["kernel"].shape).astype(np.float32),
                 "bias": np.ones(128, np.float32)},
        "c1/1": {"kernel": rng.normal(size=(5, 5, 64, 128)).astype(np.float32),
                 "bias": np.ones(128, np.float32)}}}
    fresh = np.array(child["params"]["c1/1"]["kernel"])
    spec = [SubgraphNode(same, ["conv_layer1/conv:0"]), SubgraphNode(wider, [None])]
    assert copy_replaced(graph, spec, variables, child) == ["c1/0"]
    np.testing.assert_array_equal(child["params"]["c1/0"]["kernel"], old["kernel"])
    np.testing.assert_array_equal(child["params"]["c1/0"]["bias"], old["bias"])
    np.testing.assert_array_equal(child["params"]["c1/1"]["kernel"], fresh)
    spec = [SubgraphNode(wider, ["conv_layer1/conv:0"])]  # 5x5 for a 3x3: not copied
    assert copy_replaced(graph, spec, variables, child) == []
    relu = new_op("c1/2", OpType.RELU, ["conv_layer0/avg_pool:0"])
    assert copy_replaced(graph, [SubgraphNode(relu, ["conv_layer1/conv:0"])], variables,
                         child) == []  # another type
