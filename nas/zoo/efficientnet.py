"""EfficientNet B0-B8/L2 built from MBConv blocks with squeeze-excite and stochastic depth."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Op, OpType, new_graph, new_op
from nas.zoo.common import ModelParts, factor

CONV_INIT = "I:variance_scaling:scale:2.0:mode:fan_out:distribution:truncated_normal"
DENSE_INIT = "I:variance_scaling:scale:0.33333:mode:fan_out:distribution:uniform"
BN = {"momentum": 0.99, "epsilon": 1e-3}
_BLOCK_NAME = re.compile(r"mbconv_expand(\d+)_stride(\d+)_kernel(\d+)_outputfilters(\d+)_")


@dataclass(frozen=True)
class BlockConfig:
    input_filters: int
    output_filters: int
    kernel_size: int
    num_repeat: int
    expand_ratio: int
    strides: int


@dataclass(frozen=True)
class ModelConfig:
    width_coefficient: float
    depth_coefficient: float
    resolution: int
    dropout_rate: float
    blocks: tuple[BlockConfig, ...]


B0_BLOCKS = (
    BlockConfig(32, 16, 3, 1, 1, 1),
    BlockConfig(16, 24, 3, 2, 6, 2),
    BlockConfig(24, 40, 5, 2, 6, 2),
    BlockConfig(40, 80, 3, 3, 6, 2),
    BlockConfig(80, 112, 5, 3, 6, 1),
    BlockConfig(112, 192, 5, 4, 6, 2),
    BlockConfig(192, 320, 3, 1, 6, 1),
)
MODEL_CONFIGS = {
    name: ModelConfig(w, d, r, p, B0_BLOCKS)
    for name, (w, d, r, p) in {
        "b0": (1.0, 1.0, 224, 0.2), "b1": (1.0, 1.1, 240, 0.2), "b2": (1.1, 1.2, 260, 0.3),
        "b3": (1.2, 1.4, 300, 0.3), "b4": (1.4, 1.8, 380, 0.4), "b5": (1.6, 2.2, 456, 0.4),
        "b6": (1.8, 2.6, 528, 0.5), "b7": (2.0, 3.1, 600, 0.5), "b8": (2.2, 3.6, 672, 0.5),
        "l2": (4.3, 5.3, 800, 0.5),
    }.items()
}


def round_filters(filters: int, width: float, divisor: int = 8) -> int:
    scaled = filters * width
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(rounded + divisor if rounded < 0.9 * scaled else rounded)


def round_repeats(repeats: int, depth: float) -> int:
    return int(math.ceil(depth * repeats))


def _conv(name: str, inp: str, features: Any, kernel: int, strides: int = 1,
          groups: Any = 1) -> Op:
    return new_op(name, OpType.CONV, [inp], op_kwargs={
        "features": features, "kernel_size": kernel, "strides": strides,
        "feature_group_count": groups, "use_bias": False, "kernel_init": CONV_INIT})


def _bn(name: str, inp: str) -> Op:
    return new_op(name, OpType.BATCH_NORM, [inp], op_kwargs=dict(BN))


def _dense(name: str, inp: str, features: Any) -> Op:
    return new_op(name, OpType.DENSE, [inp],
                  op_kwargs={"features": features, "kernel_init": DENSE_INIT})


def squeeze_excite(inp: str, ratio: int) -> list[Op]:
    """Global pool, bottleneck dense pair, sigmoid gate multiplied back onto the input."""
    return [
        new_op("se/pool0", OpType.AVG_POOL, [inp], input_kwargs={"window_shape": 0}),
        _dense("se/dense1", "se/pool0", factor("S:-1", div=ratio)),
        new_op("se/swish2", OpType.SWISH, ["se/dense1"]),
        _dense("se/dense3", "se/swish2", factor("S:-1", mul=ratio)),
        new_op("se/sigmoid4", OpType.SIGMOID, ["se/dense3"]),
        new_op("se/mul5", OpType.MUL, [inp, "se/sigmoid4"]),
    ]


def mb_conv_block(expand_ratio: int, stride: int, kernel_size: int,
                  output_filters: int) -> Block:
    """Inverted bottleneck; output_filters 0 keeps the block's input width."""
    ops: list[Op] = []
    current = "input"
    if expand_ratio != 1:
        ops += [_conv("expand/conv0", "input", factor("S:-1", mul=expand_ratio), 1),
                _bn("expand/bn1", "expand/conv0"),
                new_op("expand/swish2", OpType.SWISH, ["expand/bn1"])]
        current = "expand/swish2"
    ops += [_conv("depthwise/conv0", current, "S:-1", kernel_size, stride, groups="S:-1"),
            _bn("depthwise/bn1", "depthwise/conv0"),
            new_op("depthwise/swish2", OpType.SWISH, ["depthwise/bn1"])]
    ops += squeeze_excite("depthwise/swish2", expand_ratio * 4)
    ops += [_conv("project/conv0", "se/mul5", output_filters or "S:input:-1", 1),
            _bn("project/bn1", "project/conv0")]
    name = (f"mbconv_expand{expand_ratio}_stride{stride}_kernel{kernel_size}"
            f"_outputfilters{output_filters}_")
    return Block(name, new_graph(["input"], ["project/bn1"], ops))


def create_efficientnet_blocks(config: ModelConfig) -> list[Block]:
    blocks = []
    for stage in config.blocks:
        out = round_filters(stage.output_filters, config.width_coefficient)
        for i in range(round_repeats(stage.num_repeat, config.depth_coefficient)):
            first = i == 0
            blocks.append(mb_conv_block(stage.expand_ratio, stage.strides if first else 1,
                                        stage.kernel_size, out if first else 0))
    return blocks


def efficientnet(num_classes: int, config: ModelConfig,
                 blocks: Sequence[Block] | None = None) -> ModelParts:
    if blocks is None:
        blocks = create_efficientnet_blocks(config)
    width = config.width_coefficient
    ops = [_conv("stem/conv0", "input", round_filters(32, width), 3, 2),
           _bn("stem/bn1", "stem/conv0"),
           new_op("stem/swish2", OpType.SWISH, ["stem/bn1"])]
    current = "stem/swish2"
    instantiated = []
    for i, block in enumerate(blocks):
        match = _BLOCK_NAME.match(block.name)
        if not match:
            raise ValueError(f"block {block.name!r} is not an MBConv block")
        stride, output_filters = int(match.group(2)), int(match.group(4))
        block = block.instantiate([current], instance_id=i)
        instantiated.append(block)
        ops += block.graph.ops
        current = block.graph.output_names[0]
        if output_filters == 0 and stride == 1:
            ops.append(new_op(f"mbconv{i}/skip", OpType.ADD, [current, block.graph.input_names[0]],
                              input_kwargs={"layer_drop_rate": 0.2 * i / len(blocks)}))
            current = f"mbconv{i}/skip"
    ops += [_conv("head/conv0", current, round_filters(1280, width), 1),
            _bn("head/bn1", "head/conv0"),
            new_op("head/swish2", OpType.SWISH, ["head/bn1"]),
            new_op("head/pool3", OpType.AVG_POOL, ["head/swish2"],
                   input_kwargs={"window_shape": 0}),
            new_op("head/dropout4", OpType.DROPOUT, ["head/pool3"],
                   op_kwargs={"rate": config.dropout_rate}),
            _dense("head/dense5", "head/dropout4", num_classes),
            new_op("head/out", OpType.FLATTEN, ["head/dense5"])]
    return new_graph(["input"], ["head/out"], ops), {}, instantiated


# The reference's (misspelt) names.
create_efficietnet_blocks = create_efficientnet_blocks
efficietnet = efficientnet


def EfficientNetB0(num_classes: int = 1000, blocks: Sequence[Block] | None = None) -> ModelParts:  # noqa: N802
    return efficientnet(num_classes, MODEL_CONFIGS["b0"], blocks)


def EfficientNetB1(num_classes: int = 1000, blocks: Sequence[Block] | None = None) -> ModelParts:  # noqa: N802
    return efficientnet(num_classes, MODEL_CONFIGS["b1"], blocks)
