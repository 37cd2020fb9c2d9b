"""Measured costs that their spread cannot tell apart rank as ties on a front.

Why: a latency (or a user's cost called with repeats) is a median of noisy timings with
an interquartile range; ordering 0.47 against 0.49 ms when each spreads by 0.1 ms orders
by noise. As for accuracy (`nas.search.strategy.noise_ties`): from the cheapest up (equal
values by row), each ungrouped row heads a group and takes every ungrouped row above it
that differs from it by less than the larger of their two spreads, and reads as its head.
A row without a spread (NaN or 0) ties only with an equal value.
"""

from __future__ import annotations

import numpy as np


def tie_heads(values: np.ndarray, spreads: np.ndarray, higher_better: bool = False
              ) -> np.ndarray:
    """Each row's group head (a row index), by the rule above. NaN values head themselves."""
    v = np.asarray(values, dtype=float).reshape(-1)
    s = np.nan_to_num(np.asarray(spreads, dtype=float).reshape(-1), nan=0.0)
    s = np.maximum(s, 0.0)
    heads = np.arange(len(v))
    if not len(v):
        return heads
    key = -v if higher_better else v
    order = np.lexsort((np.arange(len(v)), key))
    order = order[~np.isnan(key[order])]
    ordered = key[order]
    widest = float(s.max(initial=0.0))
    open_ = np.ones(len(order), dtype=bool)
    for pos in range(len(order)):
        if not open_[pos]:
            continue
        open_[pos] = False
        h = order[pos]
        end = int(np.searchsorted(ordered, ordered[pos] + max(s[h], widest), side="right"))
        among = pos + 1 + np.flatnonzero(open_[pos + 1:end])
        if not len(among):
            continue
        rows = order[among]
        tied = (ordered[among] - ordered[pos]) < np.maximum(s[h], s[rows])
        tied |= ordered[among] == ordered[pos]
        heads[rows[tied]] = h
        open_[among[tied]] = False
    return heads


def tied_values(values: np.ndarray, spreads: np.ndarray, higher_better: bool = False
                ) -> np.ndarray:
    """`values` with each replaced by its tie group head's."""
    v = np.asarray(values, dtype=float).reshape(-1)
    return v[tie_heads(v, spreads, higher_better)]


def has_spread(spreads: np.ndarray | None) -> bool:
    """Whether any row has a positive spread (else ties change nothing)."""
    if spreads is None:
        return False
    s = np.asarray(spreads, dtype=float)
    return bool(np.any(np.nan_to_num(s, nan=0.0) > 0))
