"""Settings of a search's finals (`search.finals`), checked like the rest of the search
config; the finals themselves are `nas.search.execution.finals`.

Why finals: during the search a child is compared with a seed that trained less (a child
inherits its lineage's epochs) on one small validation split. The finals train the seed and
the finalists alike, several times, and decide on every training example when data are
small, so the recommendation compares architectures and not training histories.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from nas import schema

STARTS = ("scratch", "weights")


@dataclasses.dataclass(frozen=True)
class FinalsConfig:
    # The finalists: the `k` cheapest candidates whose validation interval against the
    # seed does not already rule them out at the margin, plus the most accurate one. 0: no
    # finals (the recommendation is read from the search alone).
    k: int = 2
    repeats: int = 1  # trainings per architecture, each with its own init and data order
    # With fewer training images than `cv_below`, each repeat is a `folds`-fold
    # cross-validation over train plus validation (every example predicted once, out of
    # fold); otherwise the validation split alone decides.
    folds: int = 3
    cv_below: int = 20_000
    # Epochs of every finals training (0: the seed's from-scratch recipe, one round of
    # `search.seed_epochs`, else `train.total_epochs`). A user with more compute raises it.
    epochs: float = 0.0
    # "scratch": every architecture trains from a fresh initialization (compares
    # architectures). "weights": for a seed that came trained, each trains on from its own
    # weights until all have had the same epochs in total.
    start: str = "scratch"
    # Train the recommendation and the seed once more on train plus validation (the model
    # you take home, `export --id=recommended`), with its test accuracy reported.
    take_home: bool = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> FinalsConfig:
        data = dict(data.to_dict() if hasattr(data, "to_dict") else (data or {}))
        schema.check(data, FINALS_SCHEMA, "search.finals.")
        return cls(**data)

    @property
    def on(self) -> bool:
        return self.k > 0


FINALS_SCHEMA: dict[str, schema.Field] = {
    "k": schema.at_least(0, expected="(0: no finals)"),
    "repeats": schema.positive(),
    "folds": schema.positive(expected="(1: the validation split alone)"),
    "cv_below": schema.at_least(0, expected="(training images below which folds apply)"),
    "epochs": schema.at_least(0, float, expected="(0: the seed's epochs)"),
    "start": schema.one_of(*STARTS),
    "take_home": schema.Field(bool),
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How every finals training of one study trains: what makes two runs comparable.

    `folds` > 1: cross-validation over train plus validation (fold assignment drawn per
    repeat from `fold_seed`); 1: trained on the search's training part, evaluated on its
    validation split. `epochs`: each run's epochs ("weights": on top of the candidate's
    lineage, see `weights_epochs`)."""

    epochs: float
    folds: int
    start: str
    seed: int  # repeat r trains with train.seed + r: its own init and data order
    fold_seed: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def recipe(finals: FinalsConfig, train: Mapping[str, Any], search: Mapping[str, Any],
           training_images: int) -> Recipe:
    """The finals' recipe for a search whose training split (validation included) holds
    `training_images` images. Starting from weights never cross-validates: the weights
    were trained on the folds that would be held out."""
    epochs = finals.epochs or float(search.get("seed_epochs") or 0.0) or \
        float(train.get("total_epochs") or 1.0)
    folds = finals.folds if (finals.start == "scratch" and training_images < finals.cv_below
                             and not search.get("validation_split")) else 1
    return Recipe(float(epochs), int(folds), finals.start, int(train.get("seed", 0) or 0),
                  int(search.get("seed", 0) or 0))
