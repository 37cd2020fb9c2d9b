"""Vision Transformer (no class token, global average pooling) built from attention and MLP
blocks; each transformer layer is two pre-norm residual encoder blocks."""

from __future__ import annotations

from collections.abc import Sequence

from nas.graph.block import Block
from nas.graph.ops import Op, OpType, new_graph, new_op
from nas.zoo.common import ModelParts, factor, positive_int

XAVIER = "I:xavier_uniform"


def _dense(name: str, inp: str, features: str, bias_init: str) -> Op:
    return new_op(name, OpType.DENSE, [inp], op_kwargs={
        "features": features, "kernel_init": XAVIER, "bias_init": bias_init})


def mlp_block(dropout: float = 0.0, mlp_factor: int = 4) -> Block:
    ops = [_dense("dense0", "input", factor("S:-1", mul=mlp_factor), "I:normal:stddev:1e-6"),
           new_op("gelu1", OpType.GELU, ["dense0"])]
    last = "gelu1"
    if dropout > 0:
        ops.append(new_op("dropout2", OpType.DROPOUT, [last], op_kwargs={"rate": dropout}))
        last = "dropout2"
    ops.append(_dense(f"dense{len(ops)}", last, factor("S:-1", div=mlp_factor),
                      "I:normal:stddev:1e-6"))
    name = "mlp_block_dropout" if dropout > 0 else "mlp_block"
    return Block(name, new_graph(["input"], [ops[-1].name], ops))


def mhdpa_block(num_heads: int, head_dim: int) -> Block:
    """Multi-head dot-product attention written out op by op so it can be mutated."""
    heads = ["B", -1, "K:num_heads", "K:head_dim"]
    ops = []
    for part in ("value", "key", "query"):
        ops += [_dense(f"{part}/pre", "input", "S:-1", "I:zeros"),
                new_op(part, OpType.RESHAPE, [f"{part}/pre"], input_kwargs={"new_shape": heads})]
    ops += [
        new_op("query/scale", OpType.SCALAR_MUL, ["query"]),
        new_op("attn_weight", OpType.EINSUM, ["query/scale", "key"],
               input_kwargs={"sum": "...qhd,...khd->...hqk"}),
        new_op("attn_weight/softmax", OpType.SOFTMAX, ["attn_weight"], input_kwargs={"axis": -1}),
        new_op("attn_value", OpType.EINSUM, ["attn_weight/softmax", "value"],
               input_kwargs={"sum": "...hqk,...khd->...qhd"}),
        new_op("attn_value/reshape", OpType.RESHAPE, ["attn_value"],
               input_kwargs={"new_shape": ["B", -1, "S:input:-1"]}),
        _dense("out", "attn_value/reshape", "S:-1", "I:zeros"),
    ]
    constants = {"num_heads": num_heads, "head_dim": head_dim}
    return Block("mhdpa_block", new_graph(["input"], ["out"], ops), constants)


def patch_embedding(patch_size: int, width: int, tokens: int, pos_name: str) -> list[Op]:
    """Patches -> tokens (`reshape`) and a learned position embedding named `pos_name`."""
    return [
        new_op("embedding", OpType.CONV, ["input"], op_kwargs={
            "features": width, "kernel_size": patch_size, "strides": patch_size,
            "padding": "VALID"}),
        new_op("reshape", OpType.RESHAPE, ["embedding"],
               input_kwargs={"new_shape": ["B", -1, "S:-1"]}),
        new_op(pos_name, OpType.PARAM, [], input_kwargs={
            "init_fn": f"I:normal:stddev:{round(width ** -0.5, 3)}", "shape": [1, tokens, width]}),
    ]


def vit(blocks: Sequence[Block], patch_size: int, image_size: int, width: int,
        dropout: float = 0.0, num_classes: int = 1000) -> ModelParts:
    patch_size, image_size = positive_int("patch_size", patch_size), positive_int(
        "image_size", image_size)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    if image_size % patch_size:
        raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
    tokens = (image_size // patch_size) ** 2
    ops = [
        *patch_embedding(patch_size, width, tokens, "transformer/pos_embedding"),
        new_op("transformer/pos_embedding/add", OpType.ADD,
               ["reshape", "transformer/pos_embedding"]),
    ]
    current = "transformer/pos_embedding/add"
    if dropout > 0:
        ops.append(new_op("transformer/dropout", OpType.DROPOUT, [current],
                          op_kwargs={"rate": dropout}))
        current = "transformer/dropout"
    constants: dict = {}
    instantiated = []
    for i, block in enumerate(blocks):
        norm = f"encoder{i}/layernorm0"
        ops.append(new_op(norm, OpType.LAYER_NORM, [current]))
        block = block.instantiate([norm], instance_id=i)
        instantiated.append(block)
        constants.update(block.constants)
        ops += block.graph.ops
        last = block.graph.output_names[0]
        if dropout > 0:
            ops.append(new_op(f"encoder{i}/dropout1", OpType.DROPOUT, [last],
                              op_kwargs={"rate": dropout}))
            last = f"encoder{i}/dropout1"
        ops.append(new_op(f"encoder{i}/residual1", OpType.ADD, [current, last]))
        current = f"encoder{i}/residual1"
    ops += [
        new_op("transformer/encoder_norm", OpType.LAYER_NORM, [current]),
        new_op("gap", OpType.MEAN, ["transformer/encoder_norm"], input_kwargs={"axis": 1}),
        new_op("head", OpType.DENSE, ["gap"],
               op_kwargs={"features": num_classes, "kernel_init": "I:zeros"}),
    ]
    return new_graph(["input"], ["head"], ops), constants, instantiated


def base_vit(patch_size: int, width: int, depth: int, mlp_dim: int, num_heads: int,
             image_size: int = 224, num_classes: int = 1000, dropout: float = 0.0,
             blocks: Sequence[Block] | None = None) -> ModelParts:
    for name, value in (("width", width), ("depth", depth), ("mlp_dim", mlp_dim),
                        ("num_heads", num_heads)):
        positive_int(name, value)
    if width % num_heads or mlp_dim % width:
        raise ValueError(f"width {width} must divide by num_heads {num_heads} and divide "
                         f"mlp_dim {mlp_dim}")
    if blocks is None:
        attention = mhdpa_block(num_heads, width // num_heads)
        mlp = mlp_block(dropout, mlp_dim // width)
        blocks = [attention, mlp] * depth
    return vit(blocks, patch_size, image_size, width, dropout, num_classes)


def ViT_Ti16(**kw) -> ModelParts:  # noqa: N802
    return base_vit(16, 192, 12, 768, 3, **kw)


def ViT_S16(**kw) -> ModelParts:  # noqa: N802
    return base_vit(16, 384, 12, 1536, 6, **kw)


def ViT_B16(**kw) -> ModelParts:  # noqa: N802
    return base_vit(16, 768, 12, 3072, 12, **kw)


def ViT_L16(**kw) -> ModelParts:  # noqa: N802
    return base_vit(16, 1024, 24, 4096, 16, **kw)
