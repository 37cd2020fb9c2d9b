"""Net2Net moves: children that compute exactly what their parent computed.

`widen`: a CONV or DENSE layer gets more output units. Each new unit copies an existing
one (its kernel column, bias and any per-channel batch-norm values on the way); the next
layer's weights from every copy of a unit are divided by the number of copies, so the
next layer's pre-activations are unchanged (Net2WiderNet). The path from the widened
layer to the next one may hold per-channel ops (activations, batch norm, pooling,
dropout) and a FLATTEN before a DENSE.

`deepen`: a layer whose weights start as the identity is inserted after an activation
(Net2DeeperNet): a 1x1 CONV (4-D tensors) or a DENSE (2-D), bias zero, followed by the
same activation, which is the identity on that activation's outputs for ReLU (f(f(x)) =
f(x)). After any other tensor the identity layer alone is inserted.

Both return a new graph, its constants and complete variables (params and batch_stats);
symbolic widths (`S:-1*2`) are first fixed to their values in the parent, so widening one
layer does not resize the ones after it. Why: a fresh layer in the middle of a trained
network starts its child near chance (docs/function-preservation.md); these start it at
its parent.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from nas.graph.ops import Graph, Op, OpType, canonical_name, new_graph, new_op
from nas.mutation.move_errors import raised_as
from nas.properties.tensor_shapes import graph_shapes

# Ops between a widened layer and its consumer that act on each channel alone.
PER_CHANNEL = {OpType.RELU, OpType.GELU, OpType.SWISH, OpType.SIGMOID, OpType.RELU6,
               OpType.TANH, OpType.HARD_SWISH, OpType.LEAKY_RELU, OpType.ELU,
               OpType.BATCH_NORM, OpType.AVG_POOL, OpType.MAX_POOL, OpType.DROPOUT,
               OpType.IDENTITY}
# Activations a (ReLU-like) identity layer may be followed by: f(f(x)) = f(x)
IDEMPOTENT = {OpType.RELU, OpType.RELU6}
LINEAR = {OpType.CONV, OpType.DENSE}


class NotApplicable(ValueError):
    """The move does not apply where it was asked (the op or its path is not supported)."""


def copied(collection: Mapping[str, Any] | None) -> dict[str, Any]:
    """A variable collection whose entries a move may replace: each op's own mapping of
    arrays copied, and an array an op holds directly (a PARAM op: a layer scale, a
    position embedding) kept as it is (a move replaces such an array whole, never edits
    it in place)."""
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in (collection or {}).items()}


def consumers_of(graph: Graph) -> dict[str, list[Op]]:
    """The ops that read each tensor, by its canonical name."""
    out: dict[str, list[Op]] = {}
    for op in graph.ops:
        for name in op.input_names:
            out.setdefault(canonical_name(name), []).append(op)
    return out


def _plain_linear(op: Op) -> bool:
    return (op.type in LINEAR and int(op.op_kwargs.get("feature_group_count", 1) or 1) == 1
            and op.op_kwargs.get("use_bias", True) is not False)


def fixed_widths(graph: Graph, constants: Mapping[str, Any], input_shape: tuple[int, ...]
                 ) -> Graph:
    """`graph` with each CONV / DENSE `features` given as the number it has in it."""
    shapes = graph_shapes(graph, constants, {graph.input_names[0]: tuple(input_shape)})
    ops = []
    for op in graph.ops:
        op = copy.deepcopy(op)
        if op.type in LINEAR and isinstance(op.op_kwargs.get("features"), str):
            op.op_kwargs["features"] = int(shapes.shape(op.output_names[0])[-1])
        ops.append(op)
    return new_graph(graph.input_names, graph.output_names, ops)


def widen_path(graph: Graph, name: str) -> tuple[list[Op], Op, bool]:
    """(per-channel ops after `name`, the consuming CONV / DENSE, whether a FLATTEN sits
    before it); NotApplicable when the path branches or holds anything else."""
    by_name = {op.name: op for op in graph.ops}
    if name not in by_name or not _plain_linear(by_name[name]):
        raise NotApplicable(f"widen: {name!r} is not a CONV or DENSE without groups")
    consumers = consumers_of(graph)
    outputs = {canonical_name(n) for n in graph.output_names}
    path: list[Op] = []
    flatten = False
    tensor = canonical_name(by_name[name].output_names[0])
    while True:
        users = consumers.get(tensor, [])
        if tensor in outputs or len(users) != 1:
            raise NotApplicable(f"widen: {tensor} is a graph output or has {len(users)} "
                                f"consumers")
        op = users[0]
        if _plain_linear(op):
            return path, op, flatten
        if op.type is OpType.FLATTEN and not flatten:
            flatten = True
        elif op.type not in PER_CHANNEL or flatten:
            raise NotApplicable(f"widen: {op.name} ({op.type.name}) between {name} and the "
                                f"next layer")
        path.append(op)
        tensor = canonical_name(op.output_names[0])


def _layer(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
           name: str, input_shape: tuple[int, ...]) -> tuple[Any, ...]:
    """What widening or narrowing layer `name` starts from: the graph with fixed widths,
    the ops whose width follows it (path, next layer, flatten between), copies of the
    params and batch statistics to change, and its kernel."""
    graph = fixed_widths(graph, constants, input_shape)
    path, nxt, flatten = widen_path(graph, name)
    params, stats = copied(variables["params"]), copied(variables.get("batch_stats"))
    return graph, path, nxt, flatten, params, stats, np.asarray(params[name]["kernel"])


def widen(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
          name: str, width: int, rng: np.random.Generator,
          input_shape: tuple[int, ...]) -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    """The child with layer `name` `width` units wide (more than it has)."""
    graph, path, nxt, flatten, params, stats, kernel = _layer(graph, constants, variables,
                                                               name, input_shape)
    old = kernel.shape[-1]
    if width <= old:
        raise NotApplicable(f"widen: {name} has {old} units, asked for {width}")
    mapping = np.concatenate([np.arange(old), rng.integers(0, old, width - old)])
    counts = np.bincount(mapping, minlength=old)[mapping].astype(np.float32)
    params[name] = {k: np.asarray(v)[..., mapping] for k, v in params[name].items()}
    for op in path:
        if op.type is OpType.BATCH_NORM:
            for store in (params, stats):
                if op.name in store:
                    store[op.name] = {k: np.asarray(v)[mapping] for k, v in
                                      store[op.name].items()}
    next_kernel = np.asarray(params[nxt.name]["kernel"])
    if flatten:  # rows laid out (positions, channels): widen the channel axis
        rows = next_kernel.reshape(-1, old, next_kernel.shape[-1])
        widened = (rows[:, mapping, :] / counts[None, :, None]).reshape(-1, rows.shape[-1])
    else:
        widened = next_kernel[..., mapping, :] / counts[:, None]
    params[nxt.name] = {**params[nxt.name], "kernel": widened.astype(next_kernel.dtype)}
    ops = [copy.deepcopy(op) for op in graph.ops]
    for op in ops:
        if op.name == name:
            op.op_kwargs["features"] = int(width)
    child = new_graph(graph.input_names, graph.output_names, ops)
    out = {"params": params}
    if stats:
        out["batch_stats"] = stats
    return child, dict(constants), out


def deepen(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
           after: str, prefix: str, input_shape: tuple[int, ...]
           ) -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    """The child with an identity layer (and the activation, where it is idempotent)
    inserted after op `after`; its new ops are named `<prefix>deepen/...`."""
    graph = fixed_widths(graph, constants, input_shape)
    shapes = graph_shapes(graph, constants, {graph.input_names[0]: tuple(input_shape)})
    by_name = {op.name: op for op in graph.ops}
    if after not in by_name:
        raise NotApplicable(f"deepen: no op {after!r}")
    source = by_name[after]
    tensor = canonical_name(source.output_names[0])
    shape = shapes.shape(tensor)
    if len(shape) not in (2, 4):
        raise NotApplicable(f"deepen: {tensor} has shape {shape}, expected 2-D or 4-D")
    channels = int(shape[-1])
    layer = f"{prefix}deepen/{'conv' if len(shape) == 4 else 'dense'}"
    kwargs: dict[str, Any] = {"features": channels}
    if len(shape) == 4:
        kwargs["kernel_size"] = 1
    added = [new_op(layer, OpType.CONV if len(shape) == 4 else OpType.DENSE, [tensor],
                    op_kwargs=kwargs)]
    if source.type in IDEMPOTENT:
        added.append(new_op(f"{prefix}deepen/act", source.type, [added[0].output_names[0]],
                            op_kwargs=dict(source.op_kwargs)))
    end = added[-1].output_names[0]
    ops = []
    for op in graph.ops:
        op = copy.deepcopy(op)
        op.input_names = [end if canonical_name(n) == tensor else n for n in op.input_names]
        ops.append(op)
        if op.name == after:
            ops += added
    outputs = [end if canonical_name(n) == tensor else n for n in graph.output_names]
    child = new_graph(graph.input_names, outputs, ops)
    eye = np.eye(channels, dtype=np.float32)
    params = copied(variables["params"])
    params[layer] = {"kernel": eye.reshape(1, 1, channels, channels) if len(shape) == 4
                     else eye, "bias": np.zeros(channels, np.float32)}
    out = {**{k: v for k, v in variables.items() if k != "params"}, "params": params}
    return child, dict(constants), out


def narrow(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
           name: str, width: int, input_shape: tuple[int, ...]
           ) -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    """The child with layer `name` `width` units wide (at most what it has), keeping the
    units whose kernel columns have the largest norms, in their order, with the next
    layer's weights from them (cheap children in large steps). Not
    function-preserving: the dropped units' contributions are gone."""
    graph, path, nxt, flatten, params, stats, kernel = _layer(graph, constants, variables,
                                                               name, input_shape)
    old = kernel.shape[-1]
    if not 1 <= width <= old:
        raise NotApplicable(f"narrow: {name} has {old} units, asked for {width}")
    norms = np.linalg.norm(kernel.reshape(-1, old), axis=0)
    keep = np.sort(np.argsort(-norms, kind="stable")[:width])
    params[name] = {k: np.asarray(v)[..., keep] for k, v in params[name].items()}
    for op in path:
        for store in (params, stats):
            if op.type is OpType.BATCH_NORM and op.name in store:
                store[op.name] = {k: np.asarray(v)[keep] for k, v in store[op.name].items()}
    next_kernel = np.asarray(params[nxt.name]["kernel"])
    if flatten:
        rows = next_kernel.reshape(-1, old, next_kernel.shape[-1])[:, keep, :]
        params[nxt.name] = {**params[nxt.name], "kernel": rows.reshape(-1, rows.shape[-1])}
    else:
        params[nxt.name] = {**params[nxt.name], "kernel": next_kernel[..., keep, :]}
    ops = [copy.deepcopy(op) for op in graph.ops]
    for op in ops:
        if op.name == name:
            op.op_kwargs["features"] = int(width)
    out = {"params": params, **({"batch_stats": stats} if stats else {})}
    return new_graph(graph.input_names, graph.output_names, ops), dict(constants), out


def scale_widths(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
                 names: list[str], factor: float, input_shape: tuple[int, ...]
                 ) -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    """`narrow` applied to each of `names` (e.g. every widenable layer: the whole
    network), each to `factor` of its units (at least 1)."""
    values: Mapping[str, Any] = variables
    consts = dict(constants)
    for name in names:
        units = int(np.asarray(values["params"][name]["kernel"]).shape[-1])
        graph, consts, values = narrow(graph, consts, values, name,
                                       max(1, int(round(units * factor))), input_shape)
    return graph, consts, dict(values)


def widenable(graph: Graph) -> list[str]:
    """Names of the layers `widen` applies to."""
    out = []
    for op in graph.ops:
        try:
            widen_path(graph, op.name)
        except NotApplicable:
            continue
        out.append(op.name)
    return out


def deepenable(graph: Graph) -> list[str]:
    """Names of the ops `deepen` may insert after: activations and CONV / DENSE layers
    whose output is not a graph output."""
    outputs = {canonical_name(n) for n in graph.output_names}
    kinds = LINEAR | IDEMPOTENT | {OpType.GELU, OpType.SWISH, OpType.TANH, OpType.ELU}
    return [op.name for op in graph.ops if op.type in kinds
            and canonical_name(op.output_names[0]) not in outputs]


def propose_shrink(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
                   rng: np.random.Generator, input_shape: tuple[int, ...]
                   ) -> tuple[str, Graph, dict[str, Any], dict[str, Any]]:
    """("shrink", graph, constants, variables): the widths of one layer or of the whole
    network (drawn evenly) scaled by 1/2, or by 1/4 one time in four, largest-norm units
    kept. Why mostly 1/2: the README's 8x8 model at 1/4 everywhere (0.13x FLOPs) ended 8
    points below its parent after fine-tuning, at 1/2 (0.48x) within 1."""
    with raised_as("shrink", NotApplicable):
        names = widenable(graph)
        if not names:
            raise NotApplicable("shrink: no layer to narrow")
        if rng.random() < 0.5:
            names = [names[int(rng.integers(len(names)))]]
        factor = 0.25 if rng.random() < 0.25 else 0.5
        return ("shrink", *scale_widths(graph, constants, variables, names, factor,
                                        input_shape))


def propose(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
            rng: np.random.Generator, prefix: str, input_shape: tuple[int, ...]
            ) -> tuple[str, Graph, dict[str, Any], dict[str, Any]]:
    """(kind "widen" or "deepen", graph, constants, variables) of one Net2Net move drawn
    with `rng`: a widenable layer 1.5x or 2x as wide, or an identity layer after a drawn
    op. NotApplicable when neither move applies."""
    with raised_as("net2net", NotApplicable):
        widths, deeps = widenable(graph), deepenable(graph)
    if not widths and not deeps:
        raise NotApplicable("net2net: no layer to widen and no place to deepen")
    if widths and (not deeps or rng.random() < 0.5):
        name = widths[int(rng.integers(len(widths)))]
        with raised_as("widen", NotApplicable):
            old = int(np.asarray(variables["params"][name]["kernel"]).shape[-1])
            factor = (1.5, 2.0)[int(rng.integers(2))]
            child = widen(graph, constants, variables, name, max(old + 1, int(old * factor)),
                          rng, input_shape)
        return ("widen", *child)
    after = deeps[int(rng.integers(len(deeps)))]
    with raised_as("deepen", NotApplicable):
        return ("deepen", *deepen(graph, constants, variables, after, prefix, input_shape))
