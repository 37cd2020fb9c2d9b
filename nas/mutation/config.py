"""Settings of one mutation (`MutationConfig`) and the factories that read them.

Defaults suit the digits/CIFAR search: small subgraphs (up to 3 ops) keep synthesis fast,
and the property mutation strengths follow the reference's CIFAR settings.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Sequence
from typing import Any

from nas import schema
from nas.mutation.base import AbstractMutator
from nas.mutation.random_subgraph import RandomMutator
from nas.mutation.sequential import RandomSequentialMutator
from nas.properties.depth import DepthProperty
from nas.properties.linear import LinopProperty
from nas.properties.shape import ShapeProperty
from nas.synthesis.base import AbstractSynthesizer, Budget, Context
from nas.synthesis.enum_sequential import EnumerativeSequentialSynthesizer
from nas.synthesis.graph import GraphSynthesizer
from nas.synthesis.primer import PrimerSequentialSynthesizer
from nas.synthesis.progressive import ProgressiveSequentialSynthesizer
from nas.synthesis.random_enum_sequential import RandomEnumerativeSequentialSynthesizer
from nas.synthesis.search_space import SearchSpace

MUTATORS = ("random_sequential", "random_subgraph")
SYNTHESIZERS: dict[str, type[AbstractSynthesizer]] = {
    "progressive": ProgressiveSequentialSynthesizer,
    "enum": EnumerativeSequentialSynthesizer,
    "random_enum": RandomEnumerativeSequentialSynthesizer,
    "primer": PrimerSequentialSynthesizer,
}
DEFAULT_SYNTHESIS: dict[str, dict[str, Any]] = {
    "progressive": {"mode": "weighted", "max_delta": 2, "min_delta": 2, "eps": 0.1, "exp": 2.0,
                    "filter_progress": False, "p": 0.2},
    "enum": {"max_delta": 2, "min_delta": 2},
    "random_enum": {"max_delta": 2, "min_delta": 2},
    "primer": {},
}


# The families of moves `moves` weighs: a subgraph rewrite (or a block edit), a Net2Net move
# (widen or deepen: function-preserving, growing), a shrink (one layer and the next), a
# prune (groups of coupled channels), a drop_branch (a residual branch removed), a stride
# (moved to an earlier conv), a separable (a conv made depthwise-separable).
MOVES = ("subgraph", "net2net", "shrink", "prune", "drop_branch", "stride", "separable")
# The move kinds a child records (`Child.kind`) that are not their family's name.
FAMILY_OF = {"widen": "net2net", "deepen": "net2net", "block_add": "subgraph",
             "block_delete": "subgraph", "block_mutate": "subgraph",
             "coupling_add": "subgraph", "coupling_delete": "subgraph",
             "reversible_block": "subgraph"}


def family(kind: str | None) -> str:
    """The family of `moves` a child's kind belongs to ("subgraph" for an unknown one)."""
    kind = str(kind or "subgraph")
    return kind if kind in MOVES else FAMILY_OF.get(kind, "subgraph")


def _moves_ok(moves: Any) -> bool:
    if not hasattr(moves, "items"):  # a dict, or a config's (ml_collections) mapping
        return False
    moves = dict(moves.items())
    return (bool(moves) and set(moves) <= set(MOVES)
            and all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0
                    for w in moves.values()) and sum(moves.values()) > 0)


def _input_shape_ok(shape: Any) -> bool:
    return len(shape) >= 2 and all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                   for d in shape)


@dataclasses.dataclass(frozen=True)
class MutationConfig(schema.Section):
    """Everything `propose_child` needs besides the parent. Build from a dict with
    `MutationConfig.from_dict` (unknown or mistyped fields raise ValueError)."""

    # "random_subgraph" or "random_sequential"
    mutator: str = schema.setting("random_subgraph", schema.one_of(*MUTATORS))
    # probability of growing the subgraph by one more op
    p: float = schema.setting(0.75, schema.fraction())
    # subgraph size cap in ops (0: use max_perc)
    max_len: int = schema.setting(3, schema.at_least(0))
    # subgraph size cap as a fraction of the graph
    max_perc: float = schema.setting(0.0, schema.fraction())
    # progressive | enum | random_enum | primer
    synthesizer: str = schema.setting("progressive", schema.one_of(*SYNTHESIZERS))
    # kwargs of the synthesizer (None: defaults)
    synthesis: dict[str, Any] | None = schema.setting(
        None, schema.Field(dict, nullable=True, expected="of synthesizer kwargs"))
    # GraphSynthesizer: probability of trying to drop a branch
    graph_p: float = schema.setting(0.2, schema.fraction())
    # property mutation strengths; None disables a property
    shape_p: float = schema.setting(0.0, schema.fraction())
    depth_p: float | None = schema.setting(0.5, schema.fraction(nullable=True))
    depth_delta_max: int = schema.setting(2, schema.at_least(0))
    linear_p: float | None = schema.setting(0.5, schema.fraction(nullable=True))
    # synthesis steps for one child (a count: same child anywhere)
    max_steps: int = schema.setting(4000, schema.positive())
    # wall-clock safety net only (recorded as such if it fires)
    time_limit_s: float = schema.setting(600.0, schema.positive(float))
    # subgraph selections tried before giving up
    retries: int = schema.setting(8, schema.at_least(0))
    # probe input, batch dimension included
    input_shape: tuple[int, ...] = schema.setting((1, 32, 32, 3), schema.Field(
        list, check=_input_shape_ok,
        expected="of positive ints, batch first, e.g. (1, 32, 32, 3)"))
    # add new subgraphs as zero-initialized residuals
    function_preserving: bool = schema.setting(False, schema.Field(bool))
    # probability that a child is a Net2Net move instead (nas.mutation.net2net: a layer
    # widened by copying units, or an identity layer inserted): it starts exactly at its
    # parent's function (0: never; draws nothing, so other children are unchanged; not
    # with block-level mutation, whose children must be block edits)
    net2net_p: float = schema.setting(0.0, schema.fraction())
    # probability that a child is a shrink move (nas.mutation.net2net.propose_shrink: one
    # layer's or every layer's width scaled by 1/2 or 1/4, the largest-norm units kept);
    # drawn after net2net_p; 0: never
    shrink_p: float = schema.setting(0.0, schema.fraction())
    # The share of each family of moves (MOVES; missing: 0): one weighted draw per child,
    # a family that does not apply to the parent giving its turn to the next one drawn.
    # net2net_p or shrink_p above 0 decide instead, as they did before `moves` existed
    # (so a config that sets them over the digits preset means what it meant)
    moves: dict[str, float] | None = schema.setting(None, schema.Field(
        dict, nullable=True, check=_moves_ok,
        expected=f"of weights >= 0 (not all 0) of {', '.join(MOVES)}"))
    # Whether the search draws `moves` by what paid in the study so far: each family's
    # share times its (children that reached the validation front or stayed within the
    # recommendation's margin at a lower cost + 1) / (tries + 2), counted over the results
    # a proposal reads, so the same after a resume; each family keeps `move_floor` of the
    # draws (nas.search.strategy.move_mix)
    adapt_moves: bool = schema.setting(True, schema.Field(bool))
    move_floor: float = schema.setting(0.05, schema.Field(float, low=0.0, high=0.2))
    # Block-level mutation (needs the parent's blocks and a zoo builder; a graph without
    # blocks, e.g. a user's seed graph, is mutated by subgraph). One draw per child: add a
    # copy of a block with block_add_prob, delete one with block_delete_prob, else redefine
    # one block; each other instance of that block follows with block_mutate_prob.
    # Off by default: whole-graph subgraph mutation also edits the stem and the classifier,
    # and its new ops are fitted before training (nas.train.fit).
    mutate_by_block: bool = schema.setting(False, schema.Field(bool))
    block_add_prob: float = schema.setting(0.2, schema.fraction())
    block_delete_prob: float = schema.setting(0.2, schema.fraction())
    block_mutate_prob: float = schema.setting(0.2, schema.fraction())
    # names new ops/blocks; None: derived from the seed
    child_id: int | None = schema.setting(None, schema.at_least(0, nullable=True))
    # nas.synthesis.search_space.SearchSpace fields ({}: its defaults, None: the reference's
    # unrestricted space)
    search_space: dict[str, Any] | None = schema.setting(
        dict, schema.Field(dict, nullable=True, expected="of SearchSpace fields"))

    def check_section(self, prefix: str) -> None:
        if self.max_len > 0 and self.max_perc > 0:
            raise ValueError(f"config fields '{prefix}max_len' and '{prefix}max_perc': set at "
                             f"most one")
        if self.block_add_prob + self.block_delete_prob > 1.0:
            raise ValueError(
                f"config field '{prefix}block_add_prob' + '{prefix}block_delete_prob' must be "
                f"<= 1 (one draw per child decides add, delete or redefine a block), got "
                f"{self.block_add_prob:g} + {self.block_delete_prob:g}")
        if self.moves is not None:
            moves = dict(self.moves.items())
            object.__setattr__(self, "moves", {k: float(moves[k]) for k in MOVES if k in moves})
        object.__setattr__(self, "input_shape", tuple(self.input_shape))
        if self.search_space is not None:
            object.__setattr__(self, "search_space",
                               SearchSpace.from_dict(self.search_space).to_dict())

    @property
    def drawn_moves(self) -> dict[str, float] | None:
        """The `moves` a child is drawn by; None where net2net_p and shrink_p decide."""
        return None if self.net2net_p or self.shrink_p else self.moves

    def synthesis_kwargs(self) -> dict[str, Any]:
        kwargs = dict(DEFAULT_SYNTHESIS[self.synthesizer])
        kwargs.update(self.synthesis or {})
        if self.search_space is not None:
            kwargs.setdefault("space", SearchSpace.from_dict(self.search_space))
        return kwargs

    def properties(self) -> list[Any]:
        """Property prototypes carrying the configured mutation strengths."""
        props: list[Any] = [ShapeProperty(p=self.shape_p)]
        if self.depth_p is not None:
            props.append(DepthProperty(p=self.depth_p, delta_max=self.depth_delta_max))
        if self.linear_p is not None:
            props.append(LinopProperty(p=self.linear_p))
        return props

    def make_mutator(self, rng: random.Random) -> AbstractMutator:
        if self.mutator == "random_sequential":
            return RandomSequentialMutator(self.properties(), self.p, max_len=self.max_len,
                                           max_perc=self.max_perc, rng=rng)
        return RandomMutator(self.properties(), self.p, max_len=self.max_len,
                             max_perc=self.max_perc, rng=rng)

    def make_synthesizer(self, contexts: Sequence[Context], generation: int | str,
                         rng: random.Random, budget: Budget | None) -> AbstractSynthesizer:
        cls = SYNTHESIZERS[self.synthesizer]
        kwargs = self.synthesis_kwargs()
        if self.mutator == "random_subgraph":
            ctor = functools.partial(cls, generation=generation, rng=rng, budget=budget,
                                     **kwargs)
            return GraphSynthesizer(contexts, generation, sequential_ctr=ctor, rng=rng,
                                    budget=budget, p=self.graph_p)
        return cls(contexts, generation, rng=rng, budget=budget, **kwargs)
