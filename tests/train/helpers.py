"""Small graphs and configs shared by the training tests (fast on 2 CPU cores)."""

from __future__ import annotations

import ml_collections

from nas.graph import OpType, new_graph, new_op
from nas.train.config import base_config


def tiny_graph(with_bn: bool = False, features: int = 8):
    """conv3x3 -> [bn] -> relu -> avg_pool 4 -> flatten -> dense(num_classes)."""
    ops = [new_op("conv", OpType.CONV, ["input"], op_kwargs={"features": features,
                                                             "kernel_size": 3})]
    last = "conv"
    if with_bn:
        ops.append(new_op("bn", OpType.BATCH_NORM, [last]))
        last = "bn"
    ops += [
        new_op("relu", OpType.RELU, [last]),
        new_op("pool", OpType.AVG_POOL, ["relu"], input_kwargs={"window_shape": 4, "strides": 4}),
        new_op("flatten", OpType.FLATTEN, ["pool"]),
        new_op("logits", OpType.DENSE, ["flatten"], op_kwargs={"features": "K:num_classes"}),
    ]
    return new_graph(["input"], ["logits"], ops), {"num_classes": 10}


AT_32 = {"input.image_size": 32}  # tiny_config's override for a test that needs 32x32


def tiny_config(data_dir: str, **overrides) -> ml_collections.ConfigDict:
    c = base_config()
    c.input.data_dir = data_dir
    c.input.image_size = 16  # the digits at 16x16: a quarter of the FLOPs (the suite's time)
    c.input.batch_size = 64
    c.input.num_threads = 1
    c.eval.batch_size = 128
    c.total_epochs = 1.0
    c.lr = 3e-3
    c.log_training_steps = 5
    c.ckpt_steps = 0
    for key, value in overrides.items():
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return c
