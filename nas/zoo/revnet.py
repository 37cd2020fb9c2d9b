"""Reversible networks for the CPU-offload trainer: a RevNet-style CNN and a reversible
transformer. Both return `(graph, constants, blocks)` like every zoo builder; the graph is
the plain equivalent network and its constants carry the `ReversibleSpec` marking, so the
standard trainer and `nas.train.reversible` train the same parameters.

`blocks` lists the layers a block-level mutator may edit (`ReversibleSpec.mutable_blocks`
order: each stage's standard layer, then f and g of each coupling, then the head); passing
an edited list back as `blocks=` rebuilds the network with the same layout.
"""

from __future__ import annotations

from collections.abc import Sequence

from nas.graph.block import Block
from nas.graph.ops import OpType, new_graph, new_op
from nas.graph.reversible import Coupling, RevBlock, ReversibleSpec
from nas.zoo import vit
from nas.zoo.common import ModelParts, positive_int


def _parts(spec: ReversibleSpec) -> ModelParts:
    graph, constants = spec.to_graph()
    return graph, constants, spec.mutable_blocks()


def _assemble(layout: Sequence[tuple[bool, int]], blocks: Sequence[Block]) -> ReversibleSpec:
    """A spec from `blocks` in `mutable_blocks` order; layout = (has_standard, couplings)."""
    want = sum(int(std) + 2 * n for std, n in layout) + 1
    if len(blocks) != want:
        raise ValueError(f"blocks: this layout needs {want} blocks, got {len(blocks)}")
    it = iter(blocks)
    rev = []
    for std, n in layout:
        standard = next(it) if std else None
        rev.append(RevBlock(standard, [Coupling(next(it), next(it)) for _ in range(n)]))
    return ReversibleSpec(rev, next(it))


# ------------------------------------------------------------------------ RevNet CNN
def stem_block(width: int) -> Block:
    """Image -> (x1, x2): two 3x3 convs of `width` channels."""
    ops = [new_op(f"conv{i}", OpType.CONV, ["input"],
                  op_kwargs={"features": width, "kernel_size": 3}) for i in (1, 2)]
    return Block("stem", new_graph(["input"], ["conv1", "conv2"], ops))


def transition_block() -> Block:
    """(x1, x2) -> both halved in resolution and doubled in channels (strided 3x3 convs)."""
    ops = [new_op(f"down{i}", OpType.CONV, [f"x{i}"],
                  op_kwargs={"features": "S:-1*2", "kernel_size": 3, "strides": 2})
           for i in (1, 2)]
    return Block("transition", new_graph(["x1", "x2"], ["down1", "down2"], ops))


def residual_fn_block(name: str) -> Block:
    """Pre-activation residual function: layer norm, relu, 3x3 conv keeping the channels."""
    ops = [
        new_op("norm", OpType.LAYER_NORM, ["input"]),
        new_op("relu", OpType.RELU, ["norm"]),
        new_op("conv", OpType.CONV, ["relu"], op_kwargs={"features": "S:-1", "kernel_size": 3}),
    ]
    return Block(name, new_graph(["input"], ["conv"], ops))


HEADS = ("mean", "flatten")


def head_block(head: str = "mean") -> Block:
    """(x1, x2) -> logits: sum the streams, normalize, then a dense layer on their global
    average ("mean", the usual RevNet head) or on every position ("flatten": far more
    weights, but it learns a small dataset in few steps; a mean head on the digits stayed
    near chance after 3 epochs)."""
    if head not in HEADS:
        raise ValueError(f"head {head!r}: expected one of {', '.join(HEADS)}")
    pool = (new_op("pool", OpType.MEAN, ["relu"], input_kwargs={"axis": (1, 2)})
            if head == "mean" else new_op("pool", OpType.FLATTEN, ["relu"]))
    ops = [
        new_op("merge", OpType.ADD, ["x1", "x2"]),
        new_op("norm", OpType.LAYER_NORM, ["merge"]),
        new_op("relu", OpType.RELU, ["norm"]),
        pool,
        new_op("logits", OpType.DENSE, ["pool"], op_kwargs={"features": "K:num_classes"}),
    ]
    return Block("head", new_graph(["x1", "x2"], ["logits"], ops))


def _stage_depths(depth: int, num_stages: int) -> list[int]:
    base, extra = divmod(depth, num_stages)
    return [base + (s < extra) for s in range(num_stages)]


def RevNet(  # noqa: N802
    num_classes: int = 10,
    blocks: Sequence[Block] | None = None,
    *,
    depth: int = 6,
    width: int = 16,
    num_stages: int = 2,
    head: str = "mean",
) -> ModelParts:
    """RevNet-style CNN with `depth` couplings spread over `num_stages` resolution stages;
    `head`: see `head_block`."""
    positive_int("num_classes", num_classes)
    depth, width = positive_int("depth", depth), positive_int("width", width)
    num_stages = positive_int("num_stages", num_stages)
    layout = [(True, n) for n in _stage_depths(depth, num_stages)]
    if blocks is None:
        blocks = []
        for s, (_, n) in enumerate(layout):
            blocks.append(stem_block(width) if s == 0 else transition_block())
            for _ in range(n):
                blocks += [residual_fn_block("f"), residual_fn_block("g")]
        blocks.append(Block("head", head_block(head).graph, {"num_classes": num_classes}))
    return _parts(_assemble(layout, blocks))


# ------------------------------------------------------------------------ transformer
def embed_block(patch_size: int, width: int, tokens: int) -> Block:
    """Image -> (x1, x2): patch embedding plus a learned position embedding, twice."""
    ops = [
        *vit.patch_embedding(patch_size, width, tokens, "pos_embedding"),
        new_op("x1", OpType.ADD, ["reshape", "pos_embedding"]),
        new_op("x2", OpType.IDENTITY, ["x1"]),
    ]
    return Block("embed", new_graph(["input"], ["x1", "x2"], ops))


def _prenorm(block: Block, name: str) -> Block:
    """`block` preceded by a layer norm of its input (the pre-norm transformer sublayer)."""
    inner = Block("", block.base_graph, block.base_constants).instantiate(["norm"])
    ops = [new_op("norm", OpType.LAYER_NORM, ["input"]), *inner.graph.ops]
    return Block(name, new_graph(["input"], inner.graph.output_names, ops), inner.constants)


def token_head_block() -> Block:
    ops = [
        new_op("merge", OpType.ADD, ["x1", "x2"]),
        new_op("norm", OpType.LAYER_NORM, ["merge"]),
        new_op("gap", OpType.MEAN, ["norm"], input_kwargs={"axis": 1}),
        new_op("logits", OpType.DENSE, ["gap"], op_kwargs={"features": "K:num_classes"}),
    ]
    return Block("head", new_graph(["x1", "x2"], ["logits"], ops))


def RevTransformer(  # noqa: N802
    num_classes: int = 10,
    blocks: Sequence[Block] | None = None,
    *,
    depth: int = 4,
    width: int = 64,
    num_heads: int = 4,
    mlp_factor: int = 4,
    patch_size: int = 4,
    image_size: int = 32,
) -> ModelParts:
    """Reversible ViT: f = pre-norm attention, g = pre-norm MLP, `depth` couplings."""
    for name, value in (("num_classes", num_classes), ("depth", depth), ("width", width),
                        ("num_heads", num_heads), ("mlp_factor", mlp_factor),
                        ("patch_size", patch_size), ("image_size", image_size)):
        positive_int(name, value)
    if image_size % patch_size or width % num_heads:
        raise ValueError(f"image_size {image_size} must divide by patch_size {patch_size} "
                         f"and width {width} by num_heads {num_heads}")
    layout = [(True, depth)]
    if blocks is None:
        tokens = (image_size // patch_size) ** 2
        attention = _prenorm(vit.mhdpa_block(num_heads, width // num_heads), "attention")
        mlp = _prenorm(vit.mlp_block(0.0, mlp_factor), "mlp")
        blocks = [embed_block(patch_size, width, tokens), *[attention, mlp] * depth,
                  Block("head", token_head_block().graph, {"num_classes": num_classes})]
    return _parts(_assemble(layout, blocks))
