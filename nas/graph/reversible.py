"""Reversible architectures in the IR: a body of blocks, each `(standard layer, couplings)`.

Why: the reversible trainer (`nas.train.reversible`) never stores the outputs of a coupling
`y1 = x1 + f(x2); y2 = x2 + g(y1)`, because it can recompute its inputs from them
(`x2 = y2 - g(y1); x1 = y1 - f(x2)`). For that it must know where the couplings are. A
`ReversibleSpec` says so: the activation between layers is a pair of tensors `(x1, x2)`;
each block starts with an optional standard layer (any graph, e.g. a stem or a strided
transition; its inputs are kept) followed by couplings whose `f` and `g` are ordinary
single-input graphs held as `Block`s, so block-level mutation edits them like any other
block and reversibility is kept by construction. The trailing `head` maps `(x1, x2)` to
logits (the loss layer).

`spec.to_graph()` builds the plain equivalent graph (what the standard trainer runs), with
the spec itself stored in its constants under `MARK`; `from_graph` reads it back and checks
that the graph still is exactly that network, so a graph edited without its marking is
rejected instead of silently trained with the wrong backward pass. Parameter names are the
same in both views: `<layer prefix>/<op>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Graph, Op, OpType, new_graph
from nas.graph.serialize import graph_from_dict, graph_to_dict

MARK = "__reversible__"
VERSION = 1


@dataclass
class Coupling:
    """`y1 = x1 + f(x2); y2 = x2 + g(y1)`; f and g map one tensor to one of the same shape."""

    f: Block
    g: Block


@dataclass
class RevBlock:
    """A standard layer (None: identity) followed by reversible couplings."""

    standard: Block | None = None
    couplings: list[Coupling] = field(default_factory=list)


@dataclass(frozen=True)
class LayerRef:
    """One layer of the flattened spec: its kind, op-name prefix and base block(s)."""

    kind: str  # "standard" | "coupling" | "head"
    prefix: str  # "<name>/": full op name = prefix + base op name
    blocks: tuple[Block, ...]  # (standard,) | (f, g) | (head,)


@dataclass
class ReversibleSpec:
    """A network as `blocks` of the pair stream plus a `head`; see the module docstring."""

    blocks: list[RevBlock]
    head: Block
    input_name: str = "input"

    def __post_init__(self) -> None:
        check_spec(self)

    # ----------------------------------------------------------------- layers
    def layers(self) -> Iterator[LayerRef]:
        """Every layer in forward order, named `block<b>/std`, `block<b>/rev<i>`, `head`."""
        for b, block in enumerate(self.blocks):
            if block.standard is not None:
                yield LayerRef("standard", f"block{b}/std/", (block.standard,))
            for i, c in enumerate(block.couplings):
                yield LayerRef("coupling", f"block{b}/rev{i}/", (c.f, c.g))
        yield LayerRef("head", "head/", (self.head,))

    def mutable_blocks(self) -> list[Block]:
        """The blocks a block-level mutator may edit, in a fixed order (zoo `blocks=`)."""
        out: list[Block] = []
        for block in self.blocks:
            if block.standard is not None:
                out.append(block.standard)
            for c in block.couplings:
                out += [c.f, c.g]
        return out + [self.head]

    def block_inputs(self) -> list[list[str]]:
        """For each of `mutable_blocks()`, the tensors of `to_graph()` it reads (so a
        mutator can look up their shapes in the plain graph)."""
        out: list[list[str]] = []
        stack = [self.input_name]
        for ref in self.layers():
            if ref.kind == "coupling":
                out += [[_c(stack[1])], [_c(ref.prefix + "y1")]]
                stack = [ref.prefix + "y1:0", ref.prefix + "y2:0"]
            else:
                out.append([_c(s) for s in stack])
                inst = _instantiate(ref.blocks[0], ref.prefix[:-1], stack)
                stack = list(inst.graph.output_names)
        return out

    def with_blocks(self, blocks: Sequence[Block]) -> ReversibleSpec:
        """The same layout with `blocks` (in `mutable_blocks()` order) in place of its own."""
        if len(blocks) != len(self.mutable_blocks()):
            raise ValueError(f"blocks: this spec has {len(self.mutable_blocks())} blocks, "
                             f"got {len(blocks)}")
        it = iter(blocks)
        rev = []
        for block in self.blocks:
            standard = next(it) if block.standard is not None else None
            rev.append(RevBlock(standard, [Coupling(next(it), next(it))
                                           for _ in block.couplings]))
        return ReversibleSpec(rev, next(it), self.input_name)

    # ----------------------------------------------------------------- plain graph
    def to_graph(self) -> tuple[Graph, dict[str, Any]]:
        """The equivalent plain graph and constants (the marking included)."""
        ops: list[Op] = []
        constants: dict[str, Any] = {}
        stack = [self.input_name]
        for ref in self.layers():
            if ref.kind == "coupling":
                # f reads x2; g reads y1 = x1 + f(x2).
                f = _instantiate(ref.blocks[0], ref.prefix + "f", [stack[1]])
                y1 = ref.prefix + "y1"
                g = _instantiate(ref.blocks[1], ref.prefix + "g", [y1])
                y2 = ref.prefix + "y2"
                ops += f.graph.ops
                ops.append(Op(y1, OpType.ADD, [_c(stack[0]), f.graph.output_names[0]]))
                ops += g.graph.ops
                ops.append(Op(y2, OpType.ADD, [_c(stack[1]), g.graph.output_names[0]]))
                constants.update(f.constants)
                constants.update(g.constants)
                stack = [y1 + ":0", y2 + ":0"]
            else:
                inst = _instantiate(ref.blocks[0], ref.prefix[:-1], stack)
                ops += inst.graph.ops
                constants.update(inst.constants)
                stack = list(inst.graph.output_names)
        constants[MARK] = self.to_json()  # a string: graph JSON nests inside it as is
        return new_graph([self.input_name], stack, ops), constants

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        def blk(b: Block | None) -> dict[str, Any] | None:
            if b is None:
                return None
            return {"name": b.name, "graph": graph_to_dict(b.base_graph, b.base_constants)}

        return {
            "version": VERSION,
            "input_name": self.input_name,
            "blocks": [{"standard": blk(b.standard),
                        "couplings": [{"f": blk(c.f), "g": blk(c.g)} for c in b.couplings]}
                       for b in self.blocks],
            "head": blk(self.head),
        }

    @classmethod
    def from_dict(cls, data: Any) -> ReversibleSpec:
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            raise ValueError(f"reversible marking: expected a dict with version {VERSION}")

        def blk(d: Any, where: str) -> Block:
            if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
                raise ValueError(f"reversible marking: {where} must be a {{name, graph}} dict")
            graph, consts = graph_from_dict(d.get("graph"))
            return Block(d["name"], graph, consts)

        try:
            blocks = [
                RevBlock(
                    None if b.get("standard") is None else blk(b["standard"], f"block {i}"),
                    [Coupling(blk(c["f"], f"block {i} f"), blk(c["g"], f"block {i} g"))
                     for c in b.get("couplings", [])],
                )
                for i, b in enumerate(data["blocks"])
            ]
            return cls(blocks, blk(data["head"], "head"), data.get("input_name", "input"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"reversible marking is malformed: {e!r}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ReversibleSpec:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise ValueError(f"reversible marking is not valid JSON: {e}") from None


def _c(name: str) -> str:
    return name if ":" in name else name + ":0"


def _instantiate(block: Block, prefix: str, inputs: Sequence[str]) -> Block:
    """`block` with op names `<prefix>/<op>`, fed by `inputs`."""
    return Block(prefix, block.base_graph, block.base_constants).instantiate(list(inputs))


def check_spec(spec: ReversibleSpec) -> None:
    """Arity checks: the stream after each standard layer is a pair; f/g are 1 -> 1."""
    if not spec.blocks:
        raise ValueError("reversible spec: needs at least one block")
    width = 1
    for b, block in enumerate(spec.blocks):
        if block.standard is not None:
            g = block.standard.base_graph
            if len(g.input_names) != width:
                raise ValueError(f"reversible spec: block {b} standard layer takes "
                                 f"{len(g.input_names)} inputs, the stream has {width}")
            width = len(g.output_names)
        if block.couplings and width != 2:
            raise ValueError(f"reversible spec: block {b} has couplings but the stream has "
                             f"{width} tensors; a standard layer must produce (x1, x2)")
        for i, c in enumerate(block.couplings):
            for part, blk in (("f", c.f), ("g", c.g)):
                g = blk.base_graph
                if len(g.input_names) != 1 or len(g.output_names) != 1:
                    raise ValueError(f"reversible spec: block {b} coupling {i} {part} must "
                                     f"map one tensor to one, got {len(g.input_names)} -> "
                                     f"{len(g.output_names)}")
    head = spec.head.base_graph
    if len(head.input_names) != width or len(head.output_names) != 1:
        raise ValueError(f"reversible spec: head must map the {width}-tensor stream to one "
                         f"output (logits), got {len(head.input_names)} -> "
                         f"{len(head.output_names)}")


def is_reversible(constants: Mapping[str, Any] | None) -> bool:
    return bool(constants) and MARK in constants


def from_graph(graph: Graph, constants: Mapping[str, Any] | None) -> ReversibleSpec:
    """The spec marked in `constants`; ValueError if absent or if `graph` no longer matches."""
    if not is_reversible(constants):
        raise ValueError(f"graph is not marked reversible (no {MARK!r} entry in constants); "
                         f"build it with a ReversibleSpec (e.g. nas.zoo.revnet)")
    mark = constants[MARK]
    spec = (ReversibleSpec.from_json(mark) if isinstance(mark, str | bytes)
            else ReversibleSpec.from_dict(mark))
    rebuilt, _ = spec.to_graph()
    if rebuilt != graph:
        raise ValueError("graph was edited without its reversible marking: it no longer "
                         "equals the network its ReversibleSpec describes")
    return spec
