"""CifarNet: a 1x1 projection, two conv/relu/avg-pool blocks and a two-layer classifier."""

from __future__ import annotations

from collections.abc import Sequence

from nas.graph.block import Block
from nas.graph.ops import OpType, new_graph, new_op
from nas.zoo.common import ModelParts, positive_int


def conv_block() -> Block:
    """Doubles the channels with a 3x3 conv, then halves the resolution."""
    ops = [
        new_op("conv", OpType.CONV, ["input"], op_kwargs={"features": "S:-1*2", "kernel_size": 3}),
        new_op("relu", OpType.RELU, ["conv"]),
        new_op("avg_pool", OpType.AVG_POOL, ["relu"],
               input_kwargs={"window_shape": 2, "strides": 2}),
    ]
    return Block("conv_layer", new_graph(["input"], ["avg_pool"], ops))


def conv_net(
    in_features: int, out_features: int, num_classes: int, blocks: Sequence[Block] | None = None
) -> ModelParts:
    if blocks is None:
        blocks = [conv_block(), conv_block()]
    ops = [new_op("proj", OpType.CONV, ["input"],
                  op_kwargs={"features": in_features, "kernel_size": 1})]
    instantiated = []
    current = "proj"
    for i, block in enumerate(blocks):
        block = block.instantiate([current], instance_id=i)
        instantiated.append(block)
        ops.extend(block.graph.ops)
        current = block.graph.output_names[0]
    ops += [
        new_op("flatten", OpType.FLATTEN, [current]),
        new_op("fc/dense", OpType.DENSE, ["flatten"], op_kwargs={"features": "K:out_features"}),
        new_op("fc/relu", OpType.RELU, ["fc/dense"]),
        new_op("fc/logits", OpType.DENSE, ["fc/relu"], op_kwargs={"features": "K:num_classes"}),
    ]
    constants = {"out_features": positive_int("out_features", out_features),
                 "num_classes": positive_int("num_classes", num_classes)}
    return new_graph(["input"], ["fc/logits"], ops), constants, instantiated


def CifarNet(num_classes: int = 10, blocks: Sequence[Block] | None = None) -> ModelParts:  # noqa: N802
    return conv_net(in_features=32, out_features=256, num_classes=num_classes, blocks=blocks)
