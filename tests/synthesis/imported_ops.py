"""A small classifier built from the op types added for imported models, shared by the
synthesis and mutation tests."""

from nas.graph import OpType, new_graph, new_op
from nas.synthesis.search_space import EXTRA_ACTIVATIONS

NEW = {OpType[n] for n in EXTRA_ACTIVATIONS}


def classifier():
    """A small image classifier with every new op type: two branches meet at a CONCAT,
    a squeeze-excite scale broadcasts over it, logits from a DENSE."""
    def conv(name, src, features, k, **kw):
        return new_op(name, OpType.CONV, [src], op_kwargs={
            "features": features, "kernel_size": (k, k), **kw})

    ops = [
        conv("stem", "input", 8, 3, strides=(2, 2)),
        new_op("stem/hs", OpType.HARD_SWISH, ["stem"]),
        conv("b1/conv", "stem/hs", 8, 3),
        new_op("b1/relu6", OpType.RELU6, ["b1/conv"]),
        conv("b2/conv", "stem/hs", 8, 1),
        new_op("b2/lrelu", OpType.LEAKY_RELU, ["b2/conv"], input_kwargs={"negative_slope": 0.1}),
        new_op("cat", OpType.CONCAT, ["b1/relu6", "b2/lrelu"], input_kwargs={"axis": -1}),
        new_op("cat/elu", OpType.ELU, ["cat"], input_kwargs={"alpha": 0.5}),
        new_op("se/mean", OpType.MEAN, ["cat/elu"], input_kwargs={"axis": (1, 2),
                                                                  "keepdims": True}),
        conv("se/conv", "se/mean", 16, 1),
        new_op("se/gate", OpType.SIGMOID, ["se/conv"]),
        new_op("se/mul", OpType.MUL, ["cat/elu", "se/gate"]),
        new_op("se/tanh", OpType.TANH, ["se/mul"]),
        new_op("head/mean", OpType.MEAN, ["se/tanh"], input_kwargs={"axis": (1, 2)}),
        new_op("head/gelu", OpType.GELU, ["head/mean"], input_kwargs={"approximate": False}),
        new_op("fc/logits", OpType.DENSE, ["head/gelu"], op_kwargs={"features": 10}),
    ]
    return new_graph(["input"], ["fc/logits"], ops)
