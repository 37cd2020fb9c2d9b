"""How a child trains: inherited parameters fine-tune, fresh ones learn from scratch.

Why: a child starts from its parent's weights, so its inherited parameters only need a small
learning rate (`search.child_lr`). Its freshly initialized ops (the synthesized subgraph)
start from random values and, at that small rate, barely move in a one-epoch budget: the
child then evaluates with a random layer in the middle of a trained network and falls to
chance (measured in benchmarks/child_collapse.py). So fresh parameters train at the full
`train.lr` while inherited ones fine-tune at `child_lr`, with the same schedule shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


def new_params_regex(new_ops: Iterable[str]) -> str:
    """A regex matching the "op/param" paths of the ops `new_ops` (and nothing else)."""
    names = sorted(set(new_ops))
    return "^(" + "|".join(re.escape(n) for n in names) + ")/[^/]+$"


def child_train_config(train: Mapping[str, Any], child_lr: float,
                       new_ops: Iterable[str]) -> dict[str, Any]:
    """`train` for a child: `lr = child_lr`, and fresh ops scaled back up to `train.lr`.

    `train.schedule` must be one dict (a list of per-regex schedules is the user's own
    recipe and is kept as is, only `lr` changes).
    """
    out = dict(train)
    if child_lr <= 0:
        return out
    base_lr = float(train["lr"])
    out["lr"] = float(child_lr)
    schedule = train.get("schedule")
    names = sorted(set(new_ops))
    if not names or not isinstance(schedule, Mapping) or base_lr <= child_lr:
        return out
    base = dict(schedule)
    fresh = dict(base, base=float(base.get("base", 1.0)) * base_lr / float(child_lr))
    out["schedule"] = [(new_params_regex(names), fresh), (".*", base)]
    return out
