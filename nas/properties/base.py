"""The property protocol: infer from a subgraph, mutate, measure distance, verify.

A property summarises what a subgraph computes (its shapes, its depth, how it mixes
dimensions). The search infers a subgraph's properties, mutates them, and accepts a new
subgraph only if it satisfies the mutated properties. Each property is one small class in
its own module; this file holds the few things they share.

Mutation is random but reproducible: `mutate(rng)` takes a seed or a
`numpy.random.Generator`, so "same seed, same child" holds for the mutation layer.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Self

import numpy as np

from nas.graph.subgraph import SubgraphModel
from nas.properties.tensor_shapes import GraphShapes

Rng = np.random.Generator | int | None


def make_rng(rng: Rng) -> np.random.Generator:
    """A Generator from a seed, an existing Generator (used as is), or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, int) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise ValueError(f"rng must be a numpy Generator, an int seed or None, got {rng!r}")


@dataclasses.dataclass(kw_only=True)
class AbstractProperty(abc.ABC):
    """Common fields: `p` (mutation strength in [0, 1]) and `safety_only` (distance is 0:
    the property only has to stay feasible, it does not steer the search).

    `input_values`, when set, replaces the subgraph model's graph inputs during inference
    (arrays, `jax.ShapeDtypeStruct`s or shape tuples).
    """

    p: float = 0.0
    safety_only: bool = False
    input_values: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not (
            0.0 <= float(self.p) <= 1.0
        ):
            raise ValueError(f"{type(self).__name__}: p must be a number in [0, 1], "
                             f"got {self.p!r}")
        self.p = float(self.p)

    @abc.abstractmethod
    def infer(self, subgraph_model: SubgraphModel, abstract: bool = True,
              shapes: GraphShapes | None = None) -> Self:
        """The property of `subgraph_model`, carrying this property's settings.

        `abstract=True` infers from structure and shapes only (nothing is executed);
        `abstract=False` executes the subgraph. `shapes` are the enclosing graph's tensor
        shapes (see `tensor_shapes.graph_shapes`), reused instead of recomputed.
        """

    @abc.abstractmethod
    def mutate(self, rng: Rng = None) -> Self:
        """A randomly changed copy; deterministic for a given seed."""

    @abc.abstractmethod
    def distance_from(self, other: Self) -> float:
        """How much stricter `self` (the target) is than `other` (a candidate's property);
        <= 0 means `other` satisfies `self`. ValueError when the two cannot be compared."""

    def is_satisfied_by(self, other: Self) -> bool:
        return self.distance_from(other) <= 0

    def verify(self, subgraph_model: SubgraphModel, abstract: bool = True,
               shapes: GraphShapes | None = None) -> bool:
        """Whether `subgraph_model` satisfies this property. Inference errors propagate;
        a candidate that cannot be compared (ValueError from distance) does not satisfy."""
        candidate = self.infer(subgraph_model, abstract=abstract, shapes=shapes)
        try:
            return self.is_satisfied_by(candidate)
        except ValueError:
            return False

    # Helpers for subclasses.

    def _check_comparable(self, other: Any) -> None:
        if type(other) is not type(self):
            raise ValueError(f"cannot compare a {type(self).__name__} with a "
                             f"{type(other).__name__}: properties must be of the same kind")

    def _mean_over_entries(self, other: Self, table: Callable[[Self], Mapping[Any, Mapping]],
                           shortfall: Callable[[Any, Any, Any, Any], float]) -> float:
        """`distance_from` of a property that is a two-level table (depth: input -> output
        -> depth; linear: output -> input -> pairing): both comparable and inferred, 0 for
        a safety-only target, else the mean over the target's entries of
        `shortfall(outer key, inner key, mine, theirs)` (theirs: None where `other` has no
        such entry); 0 for an empty table. The subclass defines `_require_inferred`."""
        self._check_comparable(other)
        self._require_inferred()  # type: ignore[attr-defined]
        other._require_inferred()  # type: ignore[attr-defined]
        if self.safety_only:
            return 0.0
        total, count = 0.0, 0
        theirs_table = table(other)
        for outer, entries in table(self).items():
            for inner, mine in entries.items():
                count += 1
                total += shortfall(outer, inner, mine, theirs_table.get(outer, {}).get(inner))
        return total / count if count else 0.0

    def _with(self, **changes: Any) -> Self:
        """A deep copy with some fields replaced (settings such as p are carried over).

        The replaced fields' old values are not copied: inferring a candidate's property
        from the target's replaces the target's whole table, which copying would cost."""
        memo: dict[int, Any] = {}  # one memo: fields that share an object still share it
        kept = {f.name: copy.deepcopy(getattr(self, f.name), memo)
                for f in dataclasses.fields(self) if f.init and f.name not in changes}
        return dataclasses.replace(self, **kept, **changes)

    def _graph_inputs(self, subgraph_model: SubgraphModel) -> Mapping[str, Any]:
        return self.input_values if self.input_values is not None else subgraph_model.inputs


def check_subgraph_model(subgraph_model: Any) -> SubgraphModel:
    if not isinstance(subgraph_model, SubgraphModel):
        raise ValueError(f"expected a SubgraphModel, got {type(subgraph_model).__name__}")
    return subgraph_model
