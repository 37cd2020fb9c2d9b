"""Which family of moves a proposal draws: the configured shares, weighed by what paid.

A child pays when it reached the validation front (accuracy against FLOPs) or stayed
within the recommendation's margin of its parent at fewer FLOPs. Each family's share is its
weight times (paid + 1) / (tries + 2), tries counting finished children and refusals; every
family with a weight keeps `move_floor` of the draws. The counts are of the results the
proposal reads, so the mix is the same for the same seed whatever the timing or resumes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from nas.mutation.config import MOVES, family
from nas.search.strategy.pareto import front_rows


@dataclasses.dataclass
class MoveCounts:
    """One family's record in a study: tries (children finished, failed or refused),
    refusals, children on the validation front, and paid."""

    tries: int = 0
    refusals: int = 0
    front: int = 0
    paid: int = 0


def _front(rows: list[tuple[int, float, float]]) -> set[int]:
    """Ids of the rows (id, accuracy, flops) no other row beats on both (ties kept)."""
    on = front_rows(np.array([acc for _, acc, _ in rows], dtype=float),
                    np.array([flops for _, _, flops in rows], dtype=float))
    return {rows[i][0] for i in on.tolist()}


def move_counts(study: Any, through: int, proposal: int | None = None,
                margin_pt: float = 2.0) -> dict[str, MoveCounts]:
    """{family: counts} over the candidates with id <= `through` and the refusals before
    proposal `proposal` (None: all)."""
    counts = {m: MoveCounts() for m in MOVES}
    rows = study.move_rows(through)
    done = {r[0]: r for r in rows if r[2] == "done" and r[3] is not None}
    front = _front([(i, float(r[3]), float(r[4] or 0.0)) for i, r in done.items()])
    for cid, parent_id, status, acc, flops, kind in rows:
        if parent_id is None or status not in ("done", "failed"):
            continue
        mine = counts[family(kind)]
        mine.tries += 1
        if cid not in done:
            continue
        parent = done.get(parent_id)
        on_front = cid in front
        cheaper = (parent is not None and flops is not None and parent[4] is not None
                   and float(flops) < float(parent[4])
                   and float(acc) >= float(parent[3]) - margin_pt / 100)
        mine.front += on_front
        mine.paid += on_front or cheaper
    for r in study.refusals():
        counted = (r.candidate_id is not None and r.candidate_id <= through) or (
            r.candidate_id is None and (proposal is None or (r.proposal is not None
                                                             and r.proposal < proposal)))
        if counted:
            mine = counts[family(r.kind)]
            mine.tries += 1
            mine.refusals += 1
    return counts


def adapted(weights: Mapping[str, float], counts: Mapping[str, MoveCounts],
            floor: float) -> dict[str, float]:
    """The shares drawn: `weights` (0 stays 0) times (paid + 1) / (tries + 2), normalized,
    each at least `floor`."""
    live = {k: float(w) for k, w in weights.items() if w > 0}
    if not live:
        return dict(weights)
    scored = {k: w * (counts[k].paid + 1) / (counts[k].tries + 2) if k in counts else w
              for k, w in live.items()}
    total = sum(scored.values())
    floor = min(float(floor), 1.0 / len(live))
    return {k: floor + (1 - floor * len(live)) * v / total for k, v in scored.items()}


def move_lines(counts: Mapping[str, MoveCounts]) -> list[str]:
    """The summary's line: each family's tries, refusals and front entries."""
    tried = [(k, c) for k, c in counts.items() if c.tries]
    if not tried:
        return []
    return ["moves (tries, refused, on the validation front): " + ", ".join(
        f"{k} {c.tries}/{c.refusals}/{c.front}" for k, c in tried)]


def for_proposal(study: Any, mutation: Mapping[str, Any], through: int, proposal: int,
                 margin_pt: float) -> dict[str, Any]:
    """The mutation config of proposal `proposal`, its `moves` `adapted` where set and
    `adapt_moves` is on."""
    from nas.mutation.config import MutationConfig

    cfg = MutationConfig.from_dict(dict(mutation))
    if cfg.drawn_moves is None or not cfg.adapt_moves:
        return dict(mutation)
    counts = move_counts(study, through, proposal, margin_pt)
    return {**dict(mutation), "moves": adapted(cfg.moves, counts, cfg.move_floor)}
