"""ResNet v1 (basic and bottleneck) with the reference's extra 1x1 `proj4` stem conv.

Layer instance ids are `<stage><layer>` (stage counts up at each stride-2 block), so ops are
named like `resnet_stride1_filtermul1_basic11/conv0` and `resnet11/skip/add0`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Op, OpType, new_graph, new_op
from nas.zoo.common import ModelParts, factor, positive_int

CONV = {"use_bias": False}
BN = {"momentum": 0.9, "epsilon": 1e-5}
_BLOCK_NAME = re.compile(r"resnet_stride(\d+)_filtermul(\d+)_(basic|bottleneck)")


def _conv(name: str, inp: str, features: Any, kernel: int, strides: int = 1) -> Op:
    kwargs = {"features": features, "kernel_size": kernel, "strides": strides, **CONV}
    return new_op(name, OpType.CONV, [inp], op_kwargs=kwargs)


def _bn(name: str, inp: str, **extra: Any) -> Op:
    return new_op(name, OpType.BATCH_NORM, [inp], op_kwargs={**BN, **extra})


def basic_block(stride: int, filter_mul: int) -> Block:
    ops = [
        _conv("conv0", "input", factor("S:-1", mul=filter_mul), 3, stride),
        _bn("bn1", "conv0"),
        new_op("relu2", OpType.RELU, ["bn1"]),
        _conv("conv3", "relu2", "S:-1", 3),
    ]
    return Block(f"resnet_stride{stride}_filtermul{filter_mul}_basic",
                 new_graph(["input"], ["conv3"], ops))


def bottleneck_block(stride: int, filter_mul: int) -> Block:
    if filter_mul < 4:
        width = factor("S:-1", div=4 // filter_mul)
    else:
        width = factor("S:-1", mul=filter_mul // 4)
    ops = [
        _conv("conv0", "input", width, 1),
        _bn("bn1", "conv0"),
        new_op("relu2", OpType.RELU, ["bn1"]),
        _conv("conv3", "relu2", "S:-1", 3, stride),
        _bn("bn4", "conv3"),
        new_op("relu5", OpType.RELU, ["bn4"]),
        _conv("conv6", "relu5", "S:-1*4", 1),
    ]
    return Block(f"resnet_stride{stride}_filtermul{filter_mul}_bottleneck",
                 new_graph(["input"], ["conv6"], ops))


def block_geometry(block: Block) -> tuple[int, int]:
    """(stride, filter_mul) of a block, read from its name (mutated names keep the stem)."""
    match = _BLOCK_NAME.match(block.name)
    if not match:
        raise ValueError(f"block {block.name!r} is not a ResNet block (expected a name like "
                         f"'resnet_stride1_filtermul1_basic')")
    return int(match.group(1)), int(match.group(2))


def residual_connection(branch: str, skip: str, prefix: str, filter_mul: int,
                        stride: int) -> list[Op]:
    ops = [_bn(f"{prefix}/bn", branch, scale_init="I:zeros")]
    if filter_mul > 1 or stride != 1:
        ops += [
            _conv(f"{prefix}/proj/conv0", skip, factor("S:-1", mul=filter_mul), 1, stride),
            _bn(f"{prefix}/proj/bn1", f"{prefix}/proj/conv0"),
        ]
        skip = f"{prefix}/proj/bn1"
    ops += [
        new_op(f"{prefix}/skip/add0", OpType.ADD, [f"{prefix}/bn", skip]),
        new_op(f"{prefix}/skip/relu1", OpType.RELU, [f"{prefix}/skip/add0"]),
    ]
    return ops


def create_resnet_blocks(block_fn, stage_sizes: Sequence[int], num_filters: int = 64,
                         expansion: int = 1) -> list[Block]:
    blocks = []
    in_filters = num_filters
    for stage, size in enumerate(stage_sizes):
        out_filters = num_filters * 2**stage * expansion
        for layer in range(size):
            stride = 2 if stage > 0 and layer == 0 else 1
            blocks.append(block_fn(stride, out_filters // in_filters))
            in_filters = out_filters
    return blocks


def resnet(num_classes: int, input_resolution: str = "small", num_filters: int = 64,
           blocks: Sequence[Block] = ()) -> ModelParts:
    if input_resolution not in ("small", "large"):
        raise ValueError(f"input_resolution must be 'small' or 'large', got {input_resolution!r}")
    kernel, stride = (3, 1) if input_resolution == "small" else (7, 2)
    ops = [
        _conv("init/conv0", "input", num_filters, kernel, stride),
        _bn("init/bn1", "init/conv0"),
        new_op("init/relu2", OpType.RELU, ["init/bn1"]),
        new_op("init/maxpool3", OpType.MAX_POOL, ["init/relu2"],
               input_kwargs={"window_shape": 3, "strides": 2, "padding": "SAME"}),
        _conv("proj4", "init/maxpool3", num_filters, 1),
    ]
    current = "proj4"
    instantiated = []
    stage, layer = 1, 0
    for block in blocks:
        block_stride, filter_mul = block_geometry(block)
        if block_stride == 2:
            stage, layer = stage + 1, 0
        layer += 1
        block = block.instantiate([current], instance_id=int(f"{stage}{layer}"))
        instantiated.append(block)
        ops += block.graph.ops
        ops += residual_connection(block.graph.output_names[0], current,
                                   f"resnet{stage}{layer}", filter_mul, block_stride)
        current = f"resnet{stage}{layer}/skip/relu1"
    ops += [
        new_op("fc/mean", OpType.MEAN, [current], input_kwargs={"axis": (1, 2)}),
        new_op("fc/dense", OpType.DENSE, ["fc/mean"],
               op_kwargs={"features": num_classes, "kernel_init": "I:zeros"}),
    ]
    return new_graph(["input"], ["fc/dense"], ops), {}, instantiated


def _builder(block_fn, stage_sizes: Sequence[int], expansion: int):
    def build(num_classes: int = 1000, input_resolution: str = "small", num_filters: int = 64,
              blocks: Sequence[Block] | None = None) -> ModelParts:
        positive_int("num_filters", num_filters)
        if blocks is None:
            blocks = create_resnet_blocks(block_fn, stage_sizes, num_filters, expansion)
        return resnet(num_classes, input_resolution, num_filters, blocks)

    return build


ResNet18 = _builder(basic_block, [2, 2, 2, 2], 1)
ResNet34 = _builder(basic_block, [3, 4, 6, 3], 1)
ResNet50 = _builder(bottleneck_block, [3, 4, 6, 3], 4)
ResNet101 = _builder(bottleneck_block, [3, 4, 23, 3], 4)
ResNet152 = _builder(bottleneck_block, [3, 8, 36, 3], 4)
ResNet200 = _builder(bottleneck_block, [3, 24, 36, 3], 4)
__all__ = ["ResNet18", "ResNet34", "ResNet50", "ResNet101", "ResNet152", "ResNet200",
           "basic_block", "bottleneck_block", "resnet"]
