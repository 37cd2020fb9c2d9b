"""Which data a search decides on (validation) and which it only reports (test).

Why: an accuracy that chose a candidate is biased upward on the data that chose it, so the
search's decisions (fronts, parents, `min_acc`, rungs, "best", export) read a validation
split, and the test split (`train.eval.data.split`) is evaluated once per candidate for the
report alone. The validation split is carved out of the training split
(`search.validation_fraction`, stratified, the same examples for every candidate, never
trained on) unless `search.validation_split` names a split of the dataset.
"""

from __future__ import annotations

from typing import Any, Protocol

import ml_collections


class SplitSettings(Protocol):
    """What the splits read of `nas.search.strategy.settings.SearchSettings` (which checks
    its fields with `check`, so cannot be imported here)."""

    @property
    def validation_split(self) -> str: ...

    @property
    def validation_fraction(self) -> float: ...


def check(train: ml_collections.ConfigDict, search: SplitSettings) -> None:
    """One-line ValueError for a search that would select on its test split (or on the
    data it trains on)."""
    test, trained = train.eval.data.split, train.input.data.split
    named = search.validation_split
    if named:
        if named in (test, trained):
            what = (
                "test split (train.eval.data.split)"
                if named == test
                else "training split (train.input.data.split)"
            )
            raise ValueError(
                f"config field 'search.validation_split' is {named!r}, the "
                f"{what}: the search would select on it; name another split or "
                f"set it to '' to carve one with search.validation_fraction"
            )
        return
    if not search.validation_fraction:
        raise ValueError(
            f"config field 'search.validation_fraction' is 0 and "
            f"search.validation_split is '': the search would select on the "
            f"test split {test!r}; set a fraction (e.g. 0.1) or name a split"
        )


def decision_config(train: Any, search: SplitSettings) -> ml_collections.ConfigDict:
    """The training config every candidate of the search trains with: evaluated on the
    validation split (its `acc`), and on the test split once at the end (`test_acc`)."""
    from nas.train.config import with_defaults

    config = with_defaults(
        ml_collections.ConfigDict(train.to_dict() if hasattr(train, "to_dict") else train)
    )
    if not config.eval.test_split:  # (a config made here already names it)
        config.eval.test_split = config.eval.data.split
    if search.validation_split:
        config.eval.data.split = search.validation_split
    else:
        from nas.train.data import HOLDOUT

        config.input.data.validation_fraction = float(search.validation_fraction)
        config.eval.data.split = HOLDOUT
    return config
