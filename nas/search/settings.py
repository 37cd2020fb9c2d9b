"""The `search` section of a search config: defaults and validation.

A search config has two sections: `train` (a `nas.train` config used for every candidate)
and `search` (below). Unknown fields and wrong types are ValueErrors naming the field.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from nas.search.fit import FitConfig
from nas.search.selection import SelectionConfig


def search_defaults() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "seed": 0,
        "max_candidates": 12,  # including the seed model
        "seed_epochs": 0.0,  # epochs for the seed model (0: train.total_epochs, like children)
        "child_lr": 0.0,  # learning rate for children, which fine-tune (0: train.lr)
        "executor": "local",  # local | ray | inline
        "workers": 1,  # candidates training at once
        "ray_address": "",  # "" starts a local Ray; "auto" joins a running cluster
        "num_cpus_per_candidate": 1.0,
        "num_gpus_per_candidate": 0.0,
        "time_limit_s": 900.0,  # per candidate; checked after each epoch
        "hard_time_limit_s": 1800.0,  # the worker is killed past this
        "max_attempts": 3,  # a candidate interrupted this often is failed
        "max_proposal_failures": 25,  # consecutive failed mutations before giving up
        "selection": {"costs": ("flops", "params"), "min_acc": 0.0},
        "mutation": {},  # passed to nas.mutation.propose_child as its config
        # nas.search.fit.FitConfig: a child's new ops are fitted to the parent's tensors
        # they replace before it trains ({"steps": 0} disables)
        "fit": {},
        "seed_graph": "",  # graph JSON or `nas-search export` file to start from ("": zoo)
    })


def _check(ref: ml_collections.ConfigDict, cfg: Any, prefix: str) -> None:
    for key in cfg:
        if key not in ref:
            raise ValueError(f"config field '{prefix}{key}' is unknown; expected one of "
                             f"{', '.join(sorted(ref))}")
    for key, default in ref.items():
        if key not in cfg or key in ("selection", "mutation", "fit"):
            continue
        value = cfg[key]
        kind = float if isinstance(default, float) else type(default)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ValueError(f"config field '{prefix}{key}' must be {kind.__name__}, "
                             f"got {value!r}")


def validate_search(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """The `search` section with defaults filled in; raises ValueError on bad fields."""
    for section in ("train", "search"):
        if section not in config:
            raise ValueError(f"search config needs a '{section}' section")
    search = search_defaults()
    _check(search, config.search, "search.")
    search.update(config.search)
    if search.max_candidates < 1:
        raise ValueError("config field 'search.max_candidates' must be >= 1")
    if search.workers < 1:
        raise ValueError("config field 'search.workers' must be >= 1")
    SelectionConfig.from_dict(dict(search.selection))  # validates its fields
    FitConfig.from_dict(dict(search.fit))
    return search
