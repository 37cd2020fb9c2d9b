"""Random sequential subgraphs: a chain of single-input ops, each consuming the previous
op's output, with exactly one exported output (what sequential synthesizers can rebuild)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from nas.graph.ops import Graph, Op, OpType, canonical_name
from nas.graph.subgraph import SubgraphNode
from nas.mutation.base import AbstractMutator, check_selection_args, size_cap

EXCLUDED_TYPES = frozenset({OpType.RESHAPE, OpType.FLATTEN, OpType.DENSE_GENERAL,
                            OpType.TRANSPOSE, OpType.SCALAR_MUL})


def check_sequential(spec: Sequence[SubgraphNode]) -> None:
    """Each node has one input, the previous node's output; exactly one output is exported."""
    for i, node in enumerate(spec):
        if len(node.op.input_names) != 1:
            raise ValueError(f"sequential subgraph op {node.op.name!r} has "
                             f"{len(node.op.input_names)} inputs, expected 1")
        if i and node.op.input_names[0] not in spec[i - 1].op.output_names:
            raise ValueError(f"sequential subgraph op {node.op.name!r} does not consume the "
                             f"previous op {spec[i - 1].op.name!r}")
    exported = [n for node in spec for n in node.output_names if n is not None]
    if len(exported) != 1:
        raise ValueError(f"a sequential subgraph exports exactly one tensor, got {exported}")


class RandomSequentialMutator(AbstractMutator):
    """A random chain of up to `max_len` ops (or `max_perc` of the graph), grown forward and
    backward from a random op and stopped early with probability 1 - p (with p == 0 the
    target length is uniform in [1, cap])."""

    def __init__(self, properties: Sequence[Any], p: float, allow_multi_outputs: bool = False,
                 max_len: int = 0, max_perc: float = 0.0,
                 rng: random.Random | None = None) -> None:
        check_selection_args(p, max_len, max_perc)
        super().__init__(properties, rng)
        self.p, self.max_len, self.max_perc = p, max_len, max_perc
        self.allow_multi_outputs = allow_multi_outputs

    def _candidate(self, op: Op) -> bool:
        return (len(op.input_names) == 1 and op.type not in EXCLUDED_TYPES
                and (self.allow_multi_outputs or op.num_outputs == 1))

    def select_subgraph(self, graph: Graph) -> list[SubgraphNode]:
        candidates = [op for op in graph.ops if self._candidate(op)]
        if not candidates:
            raise ValueError("no sequential subgraphs exist in this graph")
        cap = size_cap(len(graph.ops), self.max_len, self.max_perc)
        target = self.rng.randint(1, cap) if self.p == 0 else cap
        start = self.rng.randrange(len(candidates))
        lo = hi = start  # the chain is candidates[lo..hi]
        linked = lambda a, b: candidates[b].input_names[0] == candidates[a].output_names[0]
        while hi - lo + 1 < target:
            moves = []
            if hi + 1 < len(candidates) and linked(hi, hi + 1):
                moves.append("forward")
            if lo > 0 and linked(lo - 1, lo):
                moves.append("backward")
            if not moves:
                break
            if self.rng.choice(moves) == "forward":
                hi += 1
            else:
                lo -= 1
            if self.p > 0 and self.rng.random() > self.p:
                break
        chain = candidates[lo:hi + 1]
        consumed = {n for op in graph.ops for n in op.input_names}
        consumed |= {canonical_name(n) for n in graph.output_names}
        last = chain[-1]
        used = [n for n in last.output_names if n in consumed] or last.output_names[:1]
        export = self.rng.choice(used)
        spec = [SubgraphNode(op, []) for op in chain[:-1]]
        spec.append(SubgraphNode(last, [n if n == export else None for n in last.output_names]))
        check_sequential(spec)
        return spec
