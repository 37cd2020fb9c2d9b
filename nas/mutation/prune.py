"""Cost-reducing moves for graphs whose widths are coupled: channel pruning and branch removal.

`prune`: channels that must shrink together are found first (`channel_groups`). Both inputs
of an ADD or MUL (a residual, a gate and what it multiplies, a layer scale), a depthwise
conv's input and output, the ops that act on each channel alone (activations, norms,
pools) and the parts of a CONCAT tie channel spaces together; a graph input or output, or
an op this module does not know how to slice (a transpose, a softmax, a general dense),
freezes every space it touches. Each group keeps the channels whose producing kernels
(CONV / DENSE output columns, each producer's norms divided by their mean, summed over the
group) have the largest L2 norms, and every producer, carrier (norms, depthwise convs,
layer scales) and consumer of the group is sliced with the same indices. A GroupNorm keeps
the same number of channels in each of its groups, so its groups stay the channels they
were. Not function-preserving: the layers after the group are fitted (`resized_in_place`),
as for the shrink move.

`drop_branch`: `x + f(x)` becomes `x`; the ops that only fed `f(x)` go, every other op
keeps its name and weights, and the first CONV / DENSE layers after the ADD are fitted to
their parent's outputs.

Why: the shrink move narrows one layer and its next layer only, so it refuses wherever a
width is shared (GroupNorm with a gate and a residual, a residual NNX net), and children of
such models could only grow or be rewritten (docs/benchmarks.md, "Children of a user's
model").
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nas.graph.ops import Graph, Op, OpType, canonical_name, new_graph
from nas.mutation.move_errors import raised_as
from nas.mutation.net2net import NotApplicable, consumers_of, copied, fixed_widths
from nas.properties.tensor_shapes import graph_shapes

# Ops that act on each channel alone, whatever the width: their output has their input's
# channels.
ELEMENTWISE = {OpType.RELU, OpType.GELU, OpType.SWISH, OpType.SIGMOID, OpType.RELU6,
               OpType.TANH, OpType.HARD_SWISH, OpType.LEAKY_RELU, OpType.ELU,
               OpType.IDENTITY, OpType.NONE, OpType.DROPOUT, OpType.STOCH_DEPTH,
               OpType.SCALAR_ADD}
POOLS = {OpType.AVG_POOL, OpType.MAX_POOL}
NORMS = {OpType.BATCH_NORM, OpType.GROUP_NORM, OpType.LAYER_NORM}
# The smallest group `prune` narrows: below it a halving leaves too little to fit.
MIN_WIDTH = 4


@dataclass
class _Layout:
    """A tensor's last axis: its channel spaces in order, repeated `repeat` times (a
    FLATTEN of a feature map lays out positions x channels)."""

    spaces: list[int]
    repeat: int = 1


@dataclass
class ChannelGroups:
    """What `channel_groups` found: channel spaces (union-find) and who reads or writes
    them."""

    graph: Graph
    size: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    blocks: dict[int, list[int]] = field(default_factory=dict)  # GroupNorm num_groups
    producers: list[tuple[str, int]] = field(default_factory=list)  # kernel/bias axis -1
    carriers: list[tuple[str, _Layout]] = field(default_factory=list)  # 1-D params, axis -1
    consumers: list[tuple[str, _Layout, str]] = field(default_factory=list)  # conv / dense
    kwargs: list[tuple[str, str, _Layout]] = field(default_factory=list)  # (op, what, layout)

    def find(self, s: int) -> int:
        while self.parent[s] != s:
            self.parent[s] = self.parent[self.parent[s]]
            s = self.parent[s]
        return s

    def new(self, size: int, frozen: bool = False) -> int:
        self.size.append(int(size))
        self.parent.append(len(self.parent))
        if frozen:
            self.frozen.add(len(self.parent) - 1)
        return len(self.parent) - 1

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        self.parent[b] = a
        if b in self.frozen:
            self.frozen.add(a)
        self.blocks.setdefault(a, []).extend(self.blocks.pop(b, []))

    def freeze(self, layout: _Layout) -> None:
        self.frozen.update(self.find(s) for s in layout.spaces)

    def prunable(self) -> list[int]:
        """Roots of the groups `prune` may narrow: not frozen, written by a CONV or DENSE,
        at least MIN_WIDTH wide and divisible into their GroupNorms' groups."""
        roots = {self.find(s) for _, s in self.producers}
        out = []
        for r in sorted(roots):
            frozen = r in self.frozen or any(self.find(f) == r for f in self.frozen)
            if frozen or self.size[r] < MIN_WIDTH or self.size[r] % self.block_count(r):
                continue
            out.append(r)
        return out

    def block_count(self, root: int) -> int:
        return math.lcm(1, *self.blocks.get(self.find(root), []))

    def index(self, layout: _Layout, keep: Mapping[int, np.ndarray]) -> np.ndarray:
        """The kept positions of a tensor's last axis (every position of an unpruned
        space)."""
        parts, offset = [], 0
        for s in layout.spaces:
            r = self.find(s)
            parts.append(offset + (keep[r] if r in keep else np.arange(self.size[s])))
            offset += self.size[s]
        one = np.concatenate(parts) if parts else np.arange(0)
        if layout.repeat == 1:
            return one
        return (np.arange(layout.repeat)[:, None] * offset + one[None, :]).reshape(-1)


def _axis(value: Any, rank: int) -> list[int]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [int(v) % rank for v in values]


def channel_groups(graph: Graph, constants: Mapping[str, Any],
                   input_shape: tuple[int, ...]) -> ChannelGroups:
    """The channel spaces of `graph` (CONV / DENSE widths fixed to their values) and who
    uses them; see the module docstring for the rules."""
    graph = fixed_widths(graph, constants, input_shape)
    shapes = graph_shapes(graph, constants, {graph.input_names[0]: tuple(input_shape)})
    cg = ChannelGroups(graph)
    layouts: dict[str, _Layout] = {}

    def shape(t: str) -> tuple[int, ...]:
        return tuple(shapes.shape(t))

    def fresh(t: str, frozen: bool = True) -> _Layout:
        s = shape(t)
        return _Layout([cg.new(s[-1] if s else 1, frozen)])

    for name in graph.input_names:
        layouts[canonical_name(name)] = fresh(canonical_name(name))
    for op in graph.ops:
        ins = [layouts[canonical_name(t)] for t in op.input_names]
        outs = [canonical_name(t) for t in op.output_names]
        out = _rule(cg, op, ins, [shape(canonical_name(t)) for t in op.input_names],
                    shape(outs[0]) if outs else ())
        if out is None:  # an op this module does not slice: it freezes what it touches
            for layout in ins:
                cg.freeze(layout)
            for t in outs:
                layouts[t] = fresh(t)
            continue
        layouts[outs[0]] = out
        for t in outs[1:]:
            layouts[t] = fresh(t)
    for name in graph.output_names:
        cg.freeze(layouts[canonical_name(name)])
    return cg


def _same_structure(cg: ChannelGroups, a: _Layout, b: _Layout) -> bool:
    return (a.repeat == b.repeat and len(a.spaces) == len(b.spaces)
            and all(cg.size[x] == cg.size[y] for x, y in zip(a.spaces, b.spaces, strict=True)))


def _rule(cg: ChannelGroups, op: Op, ins: list[_Layout], in_shapes: list[tuple[int, ...]],
          out_shape: tuple[int, ...]) -> _Layout | None:
    """The output layout of `op`, recording what it slices; None: `op` freezes."""
    t, ikw = op.type, op.input_kwargs
    x = ins[0] if ins else None
    if t in (OpType.CONV, OpType.DENSE, OpType.DENSE_GENERAL):
        return _linear(cg, op, x, in_shapes)
    if t in NORMS:
        return _norm(cg, op, x)
    if t in (OpType.ADD, OpType.MUL):
        return _binary(cg, ins, in_shapes, out_shape)
    if t is OpType.CONCAT:
        return _concat(cg, ins, ikw, out_shape)
    if t in ELEMENTWISE or (t is OpType.SCALAR_MUL and ikw.get("const") is not None):
        return x
    if t in POOLS:
        return x if x.repeat == 1 else None
    if t is OpType.FLATTEN:
        if x.repeat != 1 or len(in_shapes[0]) < 2:
            return None
        return _Layout(list(x.spaces), int(np.prod(in_shapes[0][1:-1], dtype=np.int64)))
    if t is OpType.MEAN:
        rank = len(in_shapes[0])
        if x.repeat != 1 or rank - 1 in _axis(ikw["axis"], rank):
            return None
        return x
    if t is OpType.RESHAPE:
        new_shape = ikw.get("new_shape")
        if (x.repeat != 1 or not isinstance(new_shape, (list, tuple)) or not new_shape
                or not isinstance(new_shape[-1], int) or new_shape[-1] != in_shapes[0][-1]
                or out_shape[-1] != in_shapes[0][-1] or ikw.get("order") not in (None, "C")):
            return None
        cg.kwargs.append((op.name, "reshape", x))
        return x
    if t is OpType.PARAM:
        shape = ikw.get("shape")
        if not isinstance(shape, (list, tuple)) or not shape:
            return None
        layout = _Layout([cg.new(int(shape[-1]))])
        cg.carriers.append((op.name, layout))
        cg.kwargs.append((op.name, "param", layout))
        return layout
    return None


def _linear(cg: ChannelGroups, op: Op, x: _Layout, in_shapes: list[tuple[int, ...]]
            ) -> _Layout | None:
    """CONV, DENSE, DENSE_GENERAL: a consumer of `x` and a producer of a new space (a
    depthwise conv carries `x` through)."""
    t, kw = op.type, op.op_kwargs
    if t is OpType.CONV:
        groups = int(kw.get("feature_group_count", 1) or 1)
        if x.repeat != 1:
            return None
        if groups == 1:
            cg.consumers.append((op.name, x, "conv"))
            space = cg.new(int(kw["features"]))
            cg.producers.append((op.name, space))
            cg.kwargs.append((op.name, "features", _Layout([space])))
            return _Layout([space])
        if groups == in_shapes[0][-1] == int(kw["features"]):  # depthwise
            cg.carriers.append((op.name, x))
            cg.kwargs.append((op.name, "depthwise", x))
            return x
        return None
    if t is OpType.DENSE:
        cg.consumers.append((op.name, x, "dense"))
        space = cg.new(int(kw["features"]))
        cg.producers.append((op.name, space))
        cg.kwargs.append((op.name, "features", _Layout([space])))
        return _Layout([space])
    if kw.get("axis", -1) in (-1, [-1], (-1,)) and isinstance(kw.get("features"), int):
        cg.consumers.append((op.name, x, "dense"))
        return _Layout([cg.new(int(kw["features"]), frozen=True)])
    return None


def _norm(cg: ChannelGroups, op: Op, x: _Layout) -> _Layout | None:
    """A norm over the last axis carries its channels (a GroupNorm: whole groups)."""
    kw = op.op_kwargs
    if x.repeat != 1 or any(kw.get(k, -1) not in (-1, [-1], (-1,))
                            for k in ("axis", "reduction_axes", "feature_axes")):
        return None
    if op.type is OpType.GROUP_NORM:
        num = kw.get("num_groups", 32)
        if kw.get("group_size") is not None or len(x.spaces) != 1 or not isinstance(num, int):
            return None
        cg.blocks.setdefault(cg.find(x.spaces[0]), []).append(num)
    cg.carriers.append((op.name, x))
    return x


def _binary(cg: ChannelGroups, ins: list[_Layout], in_shapes: list[tuple[int, ...]],
            out_shape: tuple[int, ...]) -> _Layout | None:
    """ADD, MUL: equal widths are one group; an input of width 1 broadcasts."""
    if len(ins) != 2:
        return None
    (a, b), (sa, sb) = ins, in_shapes
    last = out_shape[-1] if out_shape else 1
    if sa and sb and sa[-1] == sb[-1] == last:
        if not _same_structure(cg, a, b):
            return None
        for p, q in zip(a.spaces, b.spaces, strict=True):
            cg.union(p, q)
        return a
    if sb and sb[-1] == 1 and sa and sa[-1] == last:
        return a
    if sa and sa[-1] == 1 and sb and sb[-1] == last:
        return b
    return None


def _concat(cg: ChannelGroups, ins: list[_Layout], ikw: Mapping[str, Any],
            out_shape: tuple[int, ...]) -> _Layout | None:
    """CONCAT: on the last axis its inputs' spaces side by side; else one group each."""
    rank = len(out_shape)
    if any(layout.repeat != 1 for layout in ins):
        return None
    if _axis(ikw.get("axis", -1), rank)[0] == rank - 1:
        return _Layout([s for layout in ins for s in layout.spaces])
    if not all(_same_structure(cg, ins[0], layout) for layout in ins[1:]):
        return None
    for layout in ins[1:]:
        for p, q in zip(ins[0].spaces, layout.spaces, strict=True):
            cg.union(p, q)
    return ins[0]


def importance(cg: ChannelGroups, variables: Mapping[str, Any], root: int) -> np.ndarray:
    """Each channel of group `root`: the L2 norms of its producers' kernel columns, each
    producer's divided by their mean (so a large-valued layer does not decide alone),
    summed."""
    total = np.zeros(cg.size[root])
    for name, space in cg.producers:
        if cg.find(space) != root:
            continue
        kernel = np.asarray(variables["params"][name]["kernel"], np.float64)
        norms = np.linalg.norm(kernel.reshape(-1, kernel.shape[-1]), axis=0)
        total += norms / (norms.mean() + 1e-12)
    return total


def kept(cg: ChannelGroups, variables: Mapping[str, Any], root: int, factor: float
         ) -> np.ndarray:
    """The channels group `root` keeps at `factor` of its width, by importance, in order;
    the same number from each GroupNorm group (contiguous blocks of the width)."""
    n, blocks = cg.size[root], cg.block_count(root)
    per = n // blocks
    keep_per = max(1, int(round(per * factor)))
    if keep_per >= per:
        raise NotApplicable(f"prune: a group {n} wide ({blocks} GroupNorm blocks) does not "
                            f"narrow at {factor:g}")
    score = importance(cg, variables, root)
    out = [b * per + np.sort(np.argsort(-score[b * per:(b + 1) * per], kind="stable")
                             [:keep_per]) for b in range(blocks)]
    return np.concatenate(out)


def _slice(array: Any, axis: int, index: np.ndarray) -> np.ndarray:
    return np.take(np.asarray(array), index, axis=axis)


def prune(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
          roots: Sequence[int] | None, factor: float, input_shape: tuple[int, ...],
          groups: ChannelGroups | None = None
          ) -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    """The child with each of the groups `roots` (of `channel_groups`; None: every prunable
    one) narrowed to `factor` of its width, the channels that matter most kept; every op
    that reads or writes them sliced to match."""
    cg = groups or channel_groups(graph, constants, input_shape)
    allowed = set(cg.prunable())
    roots = sorted(allowed) if roots is None else [cg.find(r) for r in roots]
    if not roots or not set(roots) <= allowed:
        raise NotApplicable("prune: no group of channels to narrow")
    keep = {r: kept(cg, variables, r, factor) for r in roots}
    params, stats = copied(variables["params"]), copied(variables.get("batch_stats"))
    for name, space in cg.producers:
        r = cg.find(space)
        if r in keep:
            params[name] = {k: _slice(v, -1, keep[r]) for k, v in params[name].items()}
    for name, layout, kind in cg.consumers:
        index = cg.index(layout, keep)
        kernel = np.asarray(params[name]["kernel"])
        if len(index) == kernel.shape[-2 if kind == "conv" else 0]:
            continue
        params[name] = {**params[name],
                        "kernel": _slice(kernel, -2 if kind == "conv" else 0, index)}
    for name, layout in cg.carriers:
        index = cg.index(layout, keep)
        for store in (params, stats):
            if name not in store:
                continue
            entry = store[name]
            if isinstance(entry, Mapping):
                store[name] = {k: _slice(v, -1, index) for k, v in entry.items()}
            else:  # an array the op holds directly (a PARAM: a layer scale)
                store[name] = _slice(entry, -1, index)
    widths = {}
    for name, what, layout in cg.kwargs:
        widths[name] = (what, int(len(cg.index(layout, keep))))
    ops = []
    for op in cg.graph.ops:
        op = copy.deepcopy(op)
        if op.name in widths:
            what, width = widths[op.name]
            if what == "features":
                op.op_kwargs["features"] = width
            elif what == "depthwise":
                op.op_kwargs["features"] = op.op_kwargs["feature_group_count"] = width
            elif what == "reshape":
                op.input_kwargs["new_shape"] = [*op.input_kwargs["new_shape"][:-1], width]
            elif what == "param":
                op.input_kwargs["shape"] = [*op.input_kwargs["shape"][:-1], width]
        ops.append(op)
    child = new_graph(cg.graph.input_names, cg.graph.output_names, ops)
    graph_shapes(child, constants, {child.input_names[0]: tuple(input_shape)})  # they infer
    out = {"params": params, **({"batch_stats": stats} if stats else {})}
    return child, dict(constants), out


def propose_prune(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
                  rng: np.random.Generator, input_shape: tuple[int, ...]
                  ) -> tuple[str, Graph, dict[str, Any], dict[str, Any]]:
    """("prune", graph, constants, variables): one group of coupled channels, or every
    group (drawn evenly), at 1/2 of its width, or 1/4 one time in four (the shrink move's
    steps, for the same reason)."""
    with raised_as("prune", NotApplicable):
        cg = channel_groups(graph, constants, input_shape)
        roots = cg.prunable()
        if not roots:
            raise NotApplicable("prune: no group of channels to narrow")
        one = rng.random() < 0.5
        factor = 0.25 if rng.random() < 0.25 else 0.5
        chosen = [roots[int(rng.integers(len(roots)))]] if one else roots
        return ("prune", *prune(graph, constants, variables, chosen, factor, input_shape,
                                cg))


# ---------------------------------------------------------------- removing a branch


def branch_ops(graph: Graph, add: Op, side: int) -> list[str]:
    """The ops that only feed input `side` of the ADD `add` (its branch), in graph order;
    [] where that input is shared with anything else or is a graph input."""
    consumers = consumers_of(graph)
    outputs = {canonical_name(n) for n in graph.output_names}
    producer = {canonical_name(t): op for op in graph.ops for t in op.output_names}
    other = canonical_name(add.input_names[1 - side])
    start = producer.get(canonical_name(add.input_names[side]))
    if start is None or canonical_name(add.input_names[side]) == other:
        return []

    def only_feeds(op: Op, allowed: set[str]) -> bool:
        return all(canonical_name(t) not in outputs and all(
            c.name in allowed for c in consumers.get(canonical_name(t), []))
            for t in op.output_names)

    if not only_feeds(start, {add.name}):
        return []
    branch = {start.name}
    index = {op.name: i for i, op in enumerate(graph.ops)}
    for op in reversed(graph.ops[:index[start.name]]):
        if only_feeds(op, branch) and any(
                c.name in branch for t in op.output_names
                for c in consumers.get(canonical_name(t), [])):
            branch.add(op.name)
    # x + f(x): the branch reads something, and only what the kept input is computed from
    made = {canonical_name(t) for op in graph.ops if op.name in branch for t in op.output_names}
    reads = {canonical_name(t) for op in graph.ops if op.name in branch
             for t in op.input_names} - made
    if not reads or not reads <= _ancestors(graph, other, producer) | {other}:
        return []
    return [op.name for op in graph.ops if op.name in branch]


def _ancestors(graph: Graph, tensor: str, producer: Mapping[str, Op]) -> set[str]:
    """Every tensor `tensor` is computed from (graph inputs included)."""
    out, todo = set(), [tensor]
    while todo:
        op = producer.get(todo.pop())
        if op is None:
            continue
        for t in map(canonical_name, op.input_names):
            if t not in out:
                out.add(t)
                todo.append(t)
    return out


def removable_branches(graph: Graph, constants: Mapping[str, Any],
                       input_shape: tuple[int, ...]) -> list[tuple[str, int]]:
    """(ADD op, the side whose branch goes) pairs `drop_branch` applies to: a two-input ADD
    whose output has the shape of the input kept, and a branch of its own."""
    # two images: an input that broadcasts over the batch (a parameter) shows as one
    shapes = graph_shapes(graph, constants, {graph.input_names[0]: (2, *input_shape[1:])})
    out = []
    for op in graph.ops:
        if op.type is not OpType.ADD or len(op.input_names) != 2:
            continue
        result = tuple(shapes.shape(canonical_name(op.output_names[0])))
        for side in (1, 0):
            kept_shape = tuple(shapes.shape(canonical_name(op.input_names[1 - side])))
            if kept_shape == result and branch_ops(graph, op, side):
                out.append((op.name, side))
    return out


def refit_layers(graph: Graph, tensor: str) -> list[str]:
    """The first CONV / DENSE layers on every path from `tensor` on: what a removed branch
    leaves to fit."""
    consumers = consumers_of(graph)
    found, seen, todo = [], set(), [canonical_name(tensor)]
    while todo:
        t = todo.pop()
        for op in consumers.get(t, []):
            if op.name in seen:
                continue
            seen.add(op.name)
            if op.type in (OpType.CONV, OpType.DENSE, OpType.DENSE_GENERAL):
                found.append(op.name)
            else:
                todo += [canonical_name(n) for n in op.output_names]
    return sorted(found)


def drop_branch(graph: Graph, constants: Mapping[str, Any], variables: Mapping[str, Any],
                add: str, side: int, input_shape: tuple[int, ...]
                ) -> tuple[Graph, dict[str, Any], dict[str, Any], list[str]]:
    """(graph, constants, variables, layers to fit): the child where ADD `add` gives its
    other input, the ops of its branch `side` gone."""
    by_name = {op.name: op for op in graph.ops}
    if add not in by_name or by_name[add].type is not OpType.ADD:
        raise NotApplicable(f"drop_branch: no ADD {add!r}")
    gone = set(branch_ops(graph, by_name[add], side))
    if not gone:
        raise NotApplicable(f"drop_branch: input {side} of {add} is not a branch of its own")
    kept_tensor = canonical_name(by_name[add].input_names[1 - side])
    result = canonical_name(by_name[add].output_names[0])
    gone.add(add)
    ops = []
    for op in graph.ops:
        if op.name in gone:
            continue
        op = copy.deepcopy(op)
        op.input_names = [kept_tensor if canonical_name(n) == result else n
                          for n in op.input_names]
        ops.append(op)
    outputs = [kept_tensor if canonical_name(n) == result else n for n in graph.output_names]
    child = new_graph(graph.input_names, outputs, ops)
    graph_shapes(child, constants, {child.input_names[0]: tuple(input_shape)})  # they infer
    out: dict[str, Any] = {}
    for collection, entries in variables.items():
        out[collection] = {k: (dict(v) if isinstance(v, Mapping) else v)
                           for k, v in entries.items() if k not in gone}
    return child, dict(constants), out, refit_layers(child, kept_tensor)


def propose_drop_branch(graph: Graph, constants: Mapping[str, Any],
                        variables: Mapping[str, Any], rng: np.random.Generator,
                        input_shape: tuple[int, ...]
                        ) -> tuple[str, Graph, dict[str, Any], dict[str, Any], list[str]]:
    """("drop_branch", graph, constants, variables, layers to fit) of one residual branch
    drawn evenly."""
    with raised_as("drop_branch", NotApplicable):
        choices = removable_branches(graph, constants, input_shape)
        if not choices:
            raise NotApplicable("drop_branch: no ADD with a branch of its own")
        add, side = choices[int(rng.integers(len(choices)))]
        return ("drop_branch", *drop_branch(graph, constants, variables, add, side,
                                            input_shape))
