"""Random connected subgraphs (any shape: several inputs and outputs allowed)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from nas.graph.ops import Graph, Op, OpType, canonical_name
from nas.graph.subgraph import SubgraphNode
from nas.mutation.base import AbstractMutator, check_selection_args, size_cap


def exported_spec(graph: Graph, chosen: Sequence[Op]) -> list[SubgraphNode]:
    """Self-mapping spec of `chosen` (graph order): an output is exported when it is consumed
    outside the subgraph or is a graph output."""
    names = {op.name for op in chosen}
    consumed_outside = {n for op in graph.ops if op.name not in names for n in op.input_names}
    consumed_outside |= {canonical_name(n) for n in graph.output_names}
    spec = []
    for op in graph.ops:
        if op.name in names:
            outs = [n if n in consumed_outside else None for n in op.output_names]
            spec.append(SubgraphNode(op, outs))
    return spec


class RandomMutator(AbstractMutator):
    """Grows a connected subgraph from a random op, one random neighbour at a time, up to
    `max_len` ops (or `max_perc` of the graph), stopping early with probability 1 - p."""

    def __init__(self, properties: Sequence[Any], p: float, max_len: int = 0,
                 max_perc: float = 0.0, rng: random.Random | None = None) -> None:
        check_selection_args(p, max_len, max_perc)
        super().__init__(properties, rng)
        self.p, self.max_len, self.max_perc = p, max_len, max_perc

    def select_subgraph(self, graph: Graph) -> list[SubgraphNode]:
        candidates = [op for op in graph.ops if op.type is not OpType.PARAM]
        if not candidates:
            raise ValueError("the graph has no op that can start a subgraph")
        cap = size_cap(len(graph.ops), self.max_len, self.max_perc)
        producer = {n: op for op in candidates for n in op.output_names}
        consumers: dict[str, list[Op]] = {}
        for op in candidates:
            for n in op.input_names:
                consumers.setdefault(n, []).append(op)
        chosen = [self.rng.choice(candidates)]
        names = {chosen[0].name}
        while len(chosen) < cap:
            neighbours = {}
            for op in chosen:
                for n in op.input_names:
                    if n in producer and producer[n].name not in names:
                        neighbours[producer[n].name] = producer[n]
                for n in op.output_names:
                    for c in consumers.get(n, []):
                        if c.name not in names:
                            neighbours[c.name] = c
            if not neighbours:
                break
            pick = neighbours[self.rng.choice(sorted(neighbours))]
            chosen.append(pick)
            names.add(pick.name)
            if self.rng.random() > self.p:
                break
        return exported_spec(graph, chosen)
