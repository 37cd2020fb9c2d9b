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
from typing import Any, Protocol

from nas import schema

STARTS = ("auto", "scratch", "weights")


@dataclasses.dataclass(frozen=True)
class FinalsConfig:
    # The finalists: the `k` cheapest candidates on the validation front (accuracy against
    # the recommendation's cost) whose interval against the seed does not already rule them
    # out at the margin (where the front has fewer, the cheapest others), plus the most
    # accurate one. 0: no finals (the recommendation is read from the search alone).
    k: int = 2
    # trainings per architecture, each with its own init and data order; at least as many
    # as give the run part of the finals' interval `min_run_df` degrees of freedom
    # (`trained_repeats`)
    repeats: int = 1
    # A finalist tied with the seed was found non-inferior at 2 points in 60 % of simulated
    # finals with two (one architecture's three folds), 79 % with four (a lone finalist
    # and the seed), 85 % with six (two finalists) and 98 % with ten (a lone finalist
    # twice) (tests/search/test_repeated_interval.py). 0: `repeats` alone.
    min_run_df: int = 6
    # With fewer training images than `cv_below`, each repeat is a `folds`-fold
    # cross-validation over train plus validation (every example predicted once, out of
    # fold); otherwise the validation split alone decides.
    folds: int = 3
    cv_below: int = 20_000
    # Epochs of every finals training. 0: the seed's rule. From scratch, as many epochs as
    # the seed trained in the search (all its rounds): a shorter run ranks how fast an
    # architecture starts to learn, not what it reaches. From weights, one round of
    # `search.seed_epochs` (else `train.total_epochs`) on top of the most trained lineage.
    epochs: float = 0.0
    # "scratch": every architecture trains from a fresh initialization (compares
    # architectures). "weights": each trains on from its own weights until all have had
    # the same epochs in total. "auto": "weights" when the seed arrived trained (its
    # search training gives no epoch count a retrain from scratch could copy), else
    # "scratch".
    start: str = "auto"
    # Train the recommended architecture once more as the search trained (its training
    # split, its validation split held out, the finals' epochs), and take home whichever of
    # that model and the search's own weights of it is more accurate on validation
    # (`export --id=recommended`); test accuracy is reported only.
    take_home: bool = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, prefix: str = "search.finals."
                  ) -> FinalsConfig:
        """`prefix`: the section's path, which every error names its field under."""
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
    """Repeats the finals train: those asked, or more when `finalists` and the seed over
    `folds` runs a repeat would leave the pooled run part (degrees of freedom:
    architectures x (runs - 1)) under `min_run_df`. Without folds (the validation split
    decides) each run is a whole training, and the count asked stands."""
    if folds <= 1 or finalists <= 0 or finals.min_run_df <= 0:
        return finals.repeats
    runs = -(-finals.min_run_df // (finalists + 1)) + 1
    return max(finals.repeats, -(-runs // folds))


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


class RecipeSettings(Protocol):
    """What a recipe reads of `nas.search.strategy.settings.SearchSettings` (which holds a
    `FinalsConfig`, so cannot be imported here)."""

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
    """The finals' recipe for a search whose training split (validation included) holds
    `training_images` images and whose seed ended with `seed` (its metrics; None: not
    known, the round's epochs apply). Starting from weights never cross-validates: the
    weights were trained on the folds that would be held out."""
    start = finals.start
    if start == "auto":
        start = ("weights" if seed is not None and arrived_trained(
            seed, search.seed_min_gain) else "scratch")
    one_round = seed_round_epochs(train, search.seed_epochs)
    # the seed trained its rounds, each one whole schedule of `one_round` epochs
    rounds = int((seed or {}).get("rounds") or 1)
    epochs = finals.epochs or (rounds * one_round if start == "scratch" else one_round)
    folds = finals.folds if (start == "scratch" and training_images < finals.cv_below
                             and not search.validation_split) else 1
    return Recipe(float(epochs), int(folds), start, int(train.get("seed", 0) or 0),
                  search.seed)


def seed_round_epochs(train: Mapping[str, Any], seed_epochs: float) -> float:
    """The epochs of one of the seed's rounds in the search (`search.seed_epochs`, else
    `train.total_epochs`)."""
    return float(seed_epochs or 0.0) or float(train.get("total_epochs") or 1.0)


def repeats_the_search(rec: Recipe, candidate: Any, train: Mapping[str, Any],
                       seed_epochs: float) -> bool:
    """Whether retraining `candidate` with `rec` the way the search trained would repeat
    its search training exactly: the seed, trained from scratch in one round of the
    recipe's epochs, with the same seed and data (the same program, the same weights)."""
    return (candidate.parent_id is None and rec.start == "scratch"
            and int(candidate.metrics.get("rounds") or 1) == 1
            and rec.epochs == seed_round_epochs(train, seed_epochs) and rec.seed == int(
                train.get("seed", 0) or 0))


def arrived_trained(seed: Mapping[str, Any], min_gain: float = 0.0) -> bool:
    """Whether the seed came trained: its rounds found it so (`nas.train.rounds`: its
    first evaluation within `min_gain` of its round's end), or as it arrived (its weights
    evaluated before any step) it was already within `min_gain` of where its search
    training took it, however far its first epochs strayed (a warmup can)."""
    if seed.get("arrived_trained") or str(seed.get("rounds_stopped", "")).startswith(
            "it arrived trained"):
        return True
    start, end = seed.get("start_accuracy"), seed.get("accuracy")
    return start is not None and end is not None and float(start) >= float(end) - min_gain
