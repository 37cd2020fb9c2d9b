"""Keep the network's outputs computed by a linear layer when a chain that computes one is
replaced (the search space's `linear_outputs`).

Why: an activation, normalization, pool or dropout after the classifier bounds or rescales
the logits. In the 24-candidate evolution and random searches of seeds 0-2 (six studies,
`benchmarks/search.py --arms`), 15 children put one there and 8 of them fell below 0.9 of
their parent's accuracy (0.60, 0.64, 0.66, 0.67, 0.76, 0.77, 0.85, 0.86 from parents at
0.95-0.99); 6 of the 7 whose chain ended with a DENSE or CONV kept at least 0.97 of it
(the seventh replaced a layer norm on the logits of a parent this rule would not have made).

The constraint is a property like the inferred ones, so the sequential synthesizers steer
towards it (its distance is `DISTANCE` until the chain ends with a DENSE or CONV) and
verify it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Self

from nas.graph.ops import OpType, canonical_name
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.properties.base import AbstractProperty, Rng
from nas.properties.tensor_shapes import GraphShapes

LINEAR_TYPES = frozenset({OpType.DENSE, OpType.CONV})
# The distance of a chain that does not end with one. Small next to the shape and depth
# distances, so that it decides only between otherwise equal chains while a chain grows: at
# 1.0, 3 of 24 seeded syntheses of a new CifarNet classifier more failed than at 0.25.
DISTANCE = 0.25


def producer_type(subgraph: Sequence[SubgraphNode], tensor: str) -> OpType | None:
    """The type of the subgraph op whose output replaces `tensor`, None if none does."""
    for node in subgraph:
        if any(old is not None and canonical_name(old) == canonical_name(tensor)
               for old in node.output_names):
            return node.op.type
    return None


@dataclasses.dataclass(kw_only=True)
class LinearOutputProperty(AbstractProperty):
    """The op that computes the network output `output` is a DENSE or CONV.

    Inferred: `last_type`, the type of that op in a subgraph. Never mutated."""

    output: str
    last_type: OpType | None = None

    def infer(self, subgraph_model: SubgraphModel, abstract: bool = True,
              shapes: GraphShapes | None = None) -> Self:
        return self._with(last_type=producer_type(subgraph_model.subgraph, self.output))

    def mutate(self, rng: Rng = None) -> Self:
        return self._with()

    def distance_from(self, other: Any) -> float:
        self._check_comparable(other)
        return 0.0 if other.last_type in LINEAR_TYPES else DISTANCE


def linear_output_property(model: SubgraphModel) -> LinearOutputProperty | None:
    """The constraint for one context: present when the subgraph replaces a network output
    that a DENSE or CONV computed, else None (other chains may end with anything)."""
    for output in dict.fromkeys(canonical_name(name) for name in model.graph.output_names):
        if producer_type(model.subgraph, output) in LINEAR_TYPES:
            return LinearOutputProperty(output=output)
    return None
