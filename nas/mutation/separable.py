"""A depthwise-separable convolution in place of a full one.

`separable`: a CONV with a k-position kernel from C channels to F becomes a depthwise CONV
(the same kernel size, strides, padding and dilation; one filter per input channel, no
bias) and a 1x1 CONV from C to F that keeps the layer's name, bias and output: k*C + C*F
multiplies per position instead of k*C*F. The start is the closest such pair to the full
kernel: for each input channel c, the kernel's slice W[..., c, :] (k x F) is replaced by
its best rank-one approximation (its first singular vectors), the spatial vector going to
the depthwise filter and the channel vector to the 1x1 row. Then both are fitted to the
layer's output in the parent (`nas.train.fit`), as after a shrink.

Why not a conv with few input channels: at C = 1 the pair is a rank-one version of the
whole kernel, which keeps too little to fit back from.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from nas.graph.ops import Graph, OpType, canonical_name, new_graph, new_op
from nas.mutation.move_errors import raised_as
from nas.mutation.net2net import NotApplicable, copied, fixed_widths
from nas.properties.tensor_shapes import graph_shapes

# The fewest input channels a layer needs to be made separable (see the module docstring).
MIN_CHANNELS = 4
# The most a separable pair may cost against the full layer's multiplies to be worth it.
MAX_COST = 0.8


def cost_ratio(kernel_positions: int, channels: int, features: int) -> float:
    """Multiplies per position of the separable pair over the full layer's."""
    return (kernel_positions * channels + channels * features) / (
        kernel_positions * channels * features)


def separable_convs(graph: Graph, variables: Mapping[str, Any]) -> list[str]:
    """The CONVs `separable` applies to: ungrouped, a kernel over more than one position,
    at least `MIN_CHANNELS` inputs, and a pair at most `MAX_COST` of their cost."""
    params = variables.get("params", {})
    out = []
    for op in graph.ops:
        if op.type is not OpType.CONV or int(op.op_kwargs.get("feature_group_count", 1)
                                              or 1) != 1:
            continue
        entry = params.get(op.name)
        kernel = entry.get("kernel") if isinstance(entry, Mapping) else None
        if kernel is None or np.ndim(kernel) < 3:
            continue
        *window, channels, features = np.shape(kernel)
        positions = math.prod(window)
        if (positions > 1 and channels >= MIN_CHANNELS
                and cost_ratio(positions, channels, features) <= MAX_COST):
            out.append(op.name)
    return out


def rank_one_factors(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(depthwise kernel [*window, 1, C], pointwise kernel [1.., C, F]) whose product over
    each input channel is the best rank-one approximation of `kernel` [*window, C, F]
    there."""
    kernel = np.asarray(kernel, np.float32)
    *window, channels, features = kernel.shape
    depthwise = np.zeros((*window, 1, channels), np.float32)
    pointwise = np.zeros((*(1,) * len(window), channels, features), np.float32)
    for c in range(channels):
        u, s, vt = np.linalg.svd(kernel[..., c, :].reshape(-1, features), full_matrices=False)
        root = np.sqrt(s[0])
        depthwise[..., 0, c] = (u[:, 0] * root).reshape(window)
        pointwise[..., c, :] = vt[0] * root
    return depthwise, pointwise


def separable(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
              name: str, prefix: str, input_shape: tuple[int, ...]
              ) -> tuple[Graph, dict[str, Any], dict[str, Any], list[str]]:
    """(graph, constants, variables, ops to fit): the child where CONV `name` is a
    depthwise CONV `<prefix><name>/depthwise` then a 1x1 CONV `name`."""
    if name not in separable_convs(graph, variables):
        raise NotApplicable(f"separable: {name!r} is not a CONV it applies to")
    graph = fixed_widths(graph, constants, input_shape)
    full = next(op for op in graph.ops if op.name == name)
    kernel = np.asarray(variables["params"][name]["kernel"])
    *window, channels, features = kernel.shape
    rank = len(window)
    depth_name = f"{prefix}{name}/depthwise"
    depth_kwargs = {k: v for k, v in full.op_kwargs.items() if k not in ("features", "use_bias")}
    depth_kwargs.update(features=channels, feature_group_count=channels, use_bias=False)
    depth = new_op(depth_name, OpType.CONV, full.input_names, copy.deepcopy(full.input_kwargs),
                   depth_kwargs)
    point_kwargs = {k: v for k, v in full.op_kwargs.items()
                    if k not in ("strides", "padding", "input_dilation", "kernel_dilation")}
    point_kwargs.update(kernel_size=(1,) * rank, features=features)
    ops = []
    for op in graph.ops:
        if op.name == name:
            ops.append(depth)
            ops.append(new_op(name, OpType.CONV, [canonical_name(depth.output_names[0])],
                              op_kwargs=point_kwargs))
        else:
            ops.append(copy.deepcopy(op))
    child = new_graph(graph.input_names, graph.output_names, ops)
    graph_shapes(child, constants, {child.input_names[0]: tuple(input_shape)})  # they infer
    depthwise, pointwise = rank_one_factors(kernel)
    params = copied(variables["params"])
    params[depth_name] = {"kernel": depthwise}
    params[name] = {**params[name], "kernel": pointwise}
    out = {**{k: copied(v) for k, v in variables.items() if k != "params"}, "params": params}
    return child, dict(constants), out, [name]


def propose_separable(graph: Graph, constants: Mapping[str, Any],
                      variables: Mapping[str, Any], rng: np.random.Generator, prefix: str,
                      input_shape: tuple[int, ...]
                      ) -> tuple[str, Graph, dict[str, Any], dict[str, Any], list[str]]:
    """("separable", graph, constants, variables, ops to fit) of one CONV drawn evenly."""
    with raised_as("separable", NotApplicable):
        names = separable_convs(graph, variables)
        if not names:
            raise NotApplicable("separable: no full CONV worth factoring")
        name = names[int(rng.integers(len(names)))]
        return ("separable", *separable(graph, constants, variables, name, prefix,
                                        input_shape))
