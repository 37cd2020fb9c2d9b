"""Progressive sequential synthesis: grow a chain one op at a time, guided by the distance
between the candidate's properties and the target properties.

At each step every op of the search space is appended in turn and scored; the next op is
chosen greedily (smallest distance), uniformly, or with probability decreasing with the
distance (weighted). Once the chain satisfies every property it may keep growing with
probability `p`, then its kwargs are randomized as in enumerative synthesis.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from nas.graph.ops import Op
from nas.graph.subgraph import SubgraphModel
from nas.synthesis.base import SynthesisError
from nas.synthesis.enum_sequential import EnumerativeSequentialSynthesizer
from nas.synthesis.search_space import op_enumerator


class Mode(enum.Enum):
    GREEDY = 1
    UNIFORM = 2
    WEIGHTED = 3

    @classmethod
    def parse(cls, mode: Mode | str | int) -> Mode:
        if isinstance(mode, Mode):
            return mode
        if isinstance(mode, str) and mode.upper() in cls.__members__:
            return cls[mode.upper()]
        if isinstance(mode, int) and not isinstance(mode, bool):
            return cls(mode)
        raise ValueError(f"unknown progressive synthesis mode {mode!r}; expected one of "
                         f"{', '.join(m.lower() for m in cls.__members__)}")


Candidate = tuple[list[Op], float]


class ProgressiveSequentialSynthesizer(EnumerativeSequentialSynthesizer):
    def __init__(self, *args: Any, mode: Mode | str = Mode.GREEDY, eps: float = 1.0,
                 exp: float = 1.0, p: float = 0.2, filter_progress: bool = True,
                 **kwargs: Any) -> None:
        """`EnumerativeSequentialSynthesizer`'s arguments, and how the chain grows: `mode`,
        `eps`, `exp`, `p` (the chance to go on once satisfied), `filter_progress`."""
        super().__init__(*args, **kwargs)
        if not 0 <= p <= 1:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.mode = Mode.parse(mode)
        self.eps = eps
        self.exp = exp
        self.p = p
        self.filter_progress = filter_progress

    def synthesize(self) -> list[SubgraphModel]:
        min_len, max_len = self.length_bounds()
        ops: list[Op] = []
        dist: float | None = None
        while True:
            self.check_deadline()
            if len(ops) >= max(min_len, 1) and dist == 0:
                room = max_len < 0 or len(ops) <= max_len - 2
                if not (room and self.rng.random() < self.p):
                    break
            if max_len > 0 and len(ops) >= max_len:
                break
            step = self.synthesize_one(ops, dist, max_len)
            if step is None:
                break
            ops, dist = step
        if dist != 0:
            raise SynthesisError(f"progressive synthesis stopped at length {len(ops)} with "
                                 f"property distance {dist}")
        return self.randomize_subgraph(ops)

    def append_one_op_distances(self, ops: Sequence[Op], max_len: int) -> list[Candidate]:
        """Every one-op extension of `ops` that builds, with its property distance."""
        out = []
        adjust = max_len > 0 and len(ops) + 1 >= max_len - 1
        for op in op_enumerator(self.prefix, self.kwarg_defaults, full=False,
                                op_types=self.op_types, space=self.space):
            self.check_deadline()
            spec = self.make_subgraph_spec([*ops, op], adjust_features=adjust)
            try:
                dist = self.subg_distance(self.candidate_models(spec))
            except (ValueError, KeyError, TypeError):
                continue
            # Keep the adjusted kwargs but the unsuffixed names, so the next spec renames once.
            chain = [node.op for node in spec]
            for new, raw in zip(chain, [*ops, op], strict=True):
                new.name = raw.name
            out.append((chain, dist))
        return out

    def synthesize_one(self, ops: Sequence[Op], last_dist: float | None, max_len: int
                       ) -> Candidate | None:
        candidates = self.append_one_op_distances(ops, max_len)
        if self.filter_progress and last_dist is not None:
            candidates = [c for c in candidates if c[1] < last_dist]
        if not candidates:
            return None
        near_end = max_len > 0 and len(ops) >= max_len - 2
        if self.mode is Mode.GREEDY or near_end:
            best = min(d for _, d in candidates)
            candidates = [c for c in candidates if c[1] == best]
        elif (self.eps == 0 or self.mode is Mode.UNIFORM) and any(d == 0 for _, d in candidates):
            candidates = [c for c in candidates if c[1] == 0]
        by_type: dict[str, list[Candidate]] = {}
        for cand in candidates:
            by_type.setdefault(cand[0][-1].type.name, []).append(cand)
        types = list(by_type)
        if self.mode is Mode.WEIGHTED:
            weight = lambda d: 1.0 / (d + self.eps) ** self.exp if d + self.eps > 0 else 1e12
            type_weights = [max(weight(d) for _, d in by_type[t]) for t in types]
            chosen = self.rng.choices(types, weights=type_weights)[0]
            group = by_type[chosen]
            return self.rng.choices(group, weights=[weight(d) for _, d in group])[0]
        chosen = self.rng.choice(types)
        return self.rng.choice(by_type[chosen])
