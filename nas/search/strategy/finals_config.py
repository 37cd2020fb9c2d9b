"""Settings of a search's finals (`search.finals`) and the recipe of their runs.

Why finals: in the search a child (which inherits its lineage's epochs) is compared with a
seed that trained less, on one small validation split. The finals train the seed and the
finalists alike, several times, on every training example when data are small, so the
recommendation compares architectures, not training histories.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Protocol

from nas import schema

STARTS = ("auto", "scratch", "weights")


@dataclasses.dataclass(frozen=True)
class FinalsConfig:
    # The finalists: the `k` cheapest candidates on the validation front (accuracy against
    # the recommendation's cost) not already ruled out against the seed at the margin,
    # plus the most accurate one. 0: no finals.
    k: int = 2
    # trainings per architecture (own init and data order), or more (`trained_repeats`)
    repeats: int = 1
    # the run part's least degrees of freedom: a finalist tied with the seed was found
    # non-inferior at 2 points in 60 % of simulated finals with two, 79 % with four, 85 %
    # with six and 98 % with ten (tests/search/test_repeated_interval.py). 0: `repeats`.
    min_run_df: int = 6
    # Below `cv_below` training images each repeat is a `folds`-fold cross-validation over
    # train plus validation; otherwise the validation split alone decides.
    folds: int = 3
    cv_below: int = 20_000
    # Epochs of every finals run. 0: from scratch, the seed's in the search (all its rounds:
    # a shorter run ranks how fast one starts to learn); from weights, one seed round on top.
    epochs: float = 0.0
    # "scratch" (a fresh init each), "weights" (each on from its own weights, until all
    # have had the same epochs), "auto": "weights" when the seed arrived trained.
    start: str = "auto"
    # Retrain the recommended architecture as the search trained, and take home whichever
    # of that and the search's weights is more accurate on validation.
    take_home: bool = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, prefix: str = "search.finals."
                  ) -> FinalsConfig:
        """`prefix`: the section's path, which every error names."""
        data = dict(data.to_dict() if hasattr(data, "to_dict") else (data or {}))
        schema.check(data, FINALS_SCHEMA, prefix)
        return cls(**data)

    @property
    def on(self) -> bool:
        return self.k > 0


FINALS_SCHEMA: dict[str, schema.Field] = {
    "k": schema.at_least(0, expected="(0: no finals)"),
    "repeats": schema.positive(),
    "min_run_df": schema.at_least(0, expected="(0: repeats alone)"),
    "folds": schema.positive(expected="(1: the validation split alone)"),
    "cv_below": schema.at_least(0, expected="(training images below which folds apply)"),
    "epochs": schema.at_least(0, float, expected="(0: the seed's rule)"),
    "start": schema.one_of(*STARTS),
    "take_home": schema.Field(bool),
}


def trained_repeats(finals: FinalsConfig, finalists: int, folds: int) -> int:
    """Repeats the finals train: those asked, or more where `finalists` and the seed over
    `folds` runs a repeat would leave the pooled run part (architectures x (runs - 1)
    degrees of freedom) under `min_run_df`."""
    if folds <= 1 or finalists <= 0 or finals.min_run_df <= 0:
        return finals.repeats
    runs = -(-finals.min_run_df // (finalists + 1)) + 1
    return max(finals.repeats, -(-runs // folds))


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How every finals training of one study trains: what makes two runs comparable.
    `folds` > 1: cross-validation over train plus validation (folds drawn per repeat from
    `fold_seed`); 1: the search's splits. `epochs`: each run's ("weights": on top)."""

    epochs: float
    folds: int
    start: str
    seed: int  # repeat r trains with train.seed + r: its own init and data order
    fold_seed: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


class RecipeSettings(Protocol):
    """What a recipe reads of `settings.SearchSettings` (which imports this module)."""

    @property
    def seed(self) -> int: ...

    @property
    def seed_epochs(self) -> float: ...

    @property
    def seed_min_gain(self) -> float: ...

    @property
    def validation_split(self) -> str: ...


def recipe(finals: FinalsConfig, train: Mapping[str, Any], search: RecipeSettings,
           training_images: int, seed: Mapping[str, Any] | None = None) -> Recipe:
    """The finals' recipe for a search of `training_images` training images (validation
    included) whose seed ended with metrics `seed` (None: unknown). From weights, never
    folds: the weights were trained on the folds that would be held out."""
    start = finals.start
    if start == "auto":
        start = ("weights" if seed is not None and arrived_trained(
            seed, search.seed_min_gain) else "scratch")
    one_round = seed_round_epochs(train, search.seed_epochs)
    rounds = int((seed or {}).get("rounds") or 1)
    epochs = finals.epochs or (rounds * one_round if start == "scratch" else one_round)
    folds = finals.folds if (start == "scratch" and training_images < finals.cv_below
                             and not search.validation_split) else 1
    return Recipe(float(epochs), int(folds), start, int(train.get("seed", 0) or 0),
                  search.seed)


def seed_round_epochs(train: Mapping[str, Any], seed_epochs: float) -> float:
    """The epochs of one seed round (`search.seed_epochs`, else `train.total_epochs`)."""
    return float(seed_epochs or 0.0) or float(train.get("total_epochs") or 1.0)


def repeats_the_search(rec: Recipe, candidate: Any, train: Mapping[str, Any],
                       seed_epochs: float) -> bool:
    """Whether retraining `candidate` with `rec` as the search trained would repeat its
    search training exactly: the seed, from scratch, one round, the same seed."""
    return (candidate.parent_id is None and rec.start == "scratch"
            and int(candidate.metrics.get("rounds") or 1) == 1
            and rec.epochs == seed_round_epochs(train, seed_epochs) and rec.seed == int(
                train.get("seed", 0) or 0))


def arrived_trained(seed: Mapping[str, Any], min_gain: float = 0.0) -> bool:
    """Whether the seed came trained: its rounds found it so (`nas.train.rounds`), or as it
    arrived it was already within `min_gain` of where its search training took it."""
    if seed.get("arrived_trained") or str(seed.get("rounds_stopped", "")).startswith(
            "it arrived trained"):
        return True
    start, end = seed.get("start_accuracy"), seed.get("accuracy")
    return start is not None and end is not None and float(start) >= float(end) - min_gain
