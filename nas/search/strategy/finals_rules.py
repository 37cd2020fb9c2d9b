"""The finals' rules: who goes in (`choose_finalists`), the table of their repeated runs
(`table`), what it decides (`decide`) and which trained model to take home
(`take_home_choice`). The runs themselves are kept in the study (`nas.search.store.finals`).

The finalists are the candidates the recommendation could choose: the cheapest on the
validation front not already ruled out against the seed, the most accurate child that
could be recommended over the seed, and the seed. A child off the front is beaten on
validation by one at most as costly, so it takes a finalist's place only where the front
has fewer than `k`. The decision keeps the search's rule, read from the finals' paired
comparisons: the cheapest finalist non-inferior to the reference (the seed, or the most
accurate finalist when one is better than the seed), else the reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.io import examples
from nas.search.strategy.pareto import front_rows
from nas.search.strategy.recommend import (
    Comparisons,
    Recommendation,
    Scored,
    best_by_validation,
    cheapness,
    done_of,
    feasible_ids,
    seed_of,
)
from nas.search.strategy.settings import Recipe
from nas.stats import paired
from nas.stats.paired import Paired
from nas.stats.repeated import (
    RunNoise,
    accuracy_interval,
    compare_repeated,
    run_noise,
)


@dataclasses.dataclass(frozen=True)
class Run:
    """One finals training: candidate `candidate_id`'s architecture, repeat `repeat`, fold
    `fold` (0 without folds); kind "home" is the recommended architecture retrained the
    way the search trained, a candidate for the model taken home."""

    name: str
    candidate_id: int
    kind: str
    repeat: int
    fold: int
    recipe: str
    status: str
    positions: np.ndarray | None  # which examples `correct` covers, in its order
    correct: np.ndarray | None  # which of them this run got right
    metrics: dict[str, Any]
    checkpoint_path: str | None
    error: str | None


def choose_finalists(candidates: Sequence[Scored], pairs: Comparisons, k: int,
                     margin_pt: float, cost: str, bounds: Mapping[str, float] | None = None
                     ) -> list[Scored]:
    """The seed first, then the `k` cheapest children on the validation front not ruled
    out at the margin on validation (paired with the seed), then, if the front has fewer,
    the cheapest others not ruled out (each finalist adds degrees of freedom to the
    finals' interval, and a cheap one costs little), then the most accurate child cheaper
    than the seed or more accurate than it, if not among them; with `bounds`
    (`search.constraints`), children within them only."""
    seed = seed_of(candidates)
    if seed is None or k <= 0:
        return []
    within = feasible_ids(candidates, bounds) if bounds else None
    done = [c for c in done_of(candidates)
            if c.id != seed.id and (within is None or c.id in within)]
    vs_seed = pairs.against(seed)
    alive = [c for c in done if c.id not in vs_seed
             or vs_seed[c.id].high >= -margin_pt / 100.0]
    front = on_front([seed, *done], cost)
    by_cost = sorted(alive, key=lambda c: (c.id not in front, cheapness(c, cost), c.id))
    chosen = by_cost[:k]
    # The most accurate child that could be recommended over the seed: one cheaper than
    # it (non-inferior would do), or one more accurate than it on validation (a possible
    # reference). A child as costly as the seed and less accurate could win only as a
    # reference the search's own evidence speaks against, and it would be what the finals
    # spend most on. A seed over the bounds cannot be recommended: then the most accurate
    # child within them runs.
    if within is not None and seed.id not in within:
        contenders = done
    else:
        contenders = [c for c in done if cheapness(c, cost) < cheapness(seed, cost)
                      or seed.accuracy is None or c.accuracy > seed.accuracy]
    best = best_by_validation(contenders)
    if best is not None and best.id not in {c.id for c in chosen}:
        chosen.append(best)
    return [seed, *chosen]


def on_front(candidates: Sequence[Scored], cost: str) -> set[int]:
    """Ids of the candidates on the validation front against `cost` (`pareto.front_rows`:
    ties on both stay on it); one without the cost counts as the costliest."""
    scored = [c for c in candidates if c.accuracy is not None]
    cheap = np.array([cheapness(c, cost) for c in scored], dtype=float)
    known = cheap[np.isfinite(cheap)]
    cheap[~np.isfinite(cheap)] = 2 * abs(known.max()) + 1 if known.size else 0.0
    rows = front_rows(np.array([float(c.accuracy) for c in scored]), cheap)
    return {scored[i].id for i in rows}


@dataclasses.dataclass(frozen=True)
class Row:
    """One architecture in the finals: its accuracy over the repeats (mean and interval)
    and its paired difference with the seed; `runs` trainings were read."""

    candidate: Scored
    accuracy: Paired  # difference = mean accuracy, low/high its interval
    vs_seed: Paired | None  # None for the seed itself
    runs: int
    bits: np.ndarray = dataclasses.field(repr=False)  # (repeats, examples) correct
    run_ids: np.ndarray = dataclasses.field(repr=False)  # the fold that predicted each
    epochs: float | None = None  # epochs each of its runs trained (their mean)


@dataclasses.dataclass(frozen=True)
class FinalsTable:
    """What the finals found: one row per architecture that finished every run."""

    rows: tuple[Row, ...]
    recipe: Recipe
    repeats: int
    trainings: int
    failed: tuple[str, ...]  # "candidate N: error" of runs that failed
    wall_s: float | None
    noise: RunNoise | None = None  # the run part its comparisons share


def correctness(runs: Sequence[Run], repeats: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(correct, run index) as (repeats, examples) arrays in example order, assembled from
    one architecture's done runs (each predicts its fold's examples); None unless every
    repeat predicted every example once."""
    by_repeat: dict[int, list[Run]] = {}
    for run in runs:
        by_repeat.setdefault(run.repeat, []).append(run)
    if sorted(by_repeat) != list(range(repeats)):
        return None
    rows, ids = [], []
    for r in range(repeats):
        positions = np.concatenate([run.positions for run in by_repeat[r]])
        correct = np.concatenate([run.correct for run in by_repeat[r]])
        folds = np.concatenate([np.full(run.positions.size, run.fold) for run in by_repeat[r]])
        if np.unique(positions).size != positions.size or positions.size == 0:
            return None
        order = np.argsort(positions)
        rows.append(correct[order])
        ids.append(folds[order])
    if len({row.size for row in rows}) != 1:
        return None
    return np.stack(rows), np.stack(ids)


def table(runs: Sequence[Run], candidates: dict[int, Scored], recipe: Recipe, repeats: int,
          finalists: Sequence[int], wall_s: float | None = None) -> FinalsTable | None:
    """The finals table of `finalists` (the seed first) from the finals runs of `recipe`,
    or None until every run of the seed is done."""
    wanted = {cid: [r for r in runs if r.candidate_id == cid and r.repeat < repeats]
              for cid in finalists}
    expected = repeats * recipe.folds
    failed = tuple(f"candidate {r.candidate_id}: {r.error}" for rs in wanted.values()
                   for r in rs if r.status == "failed")
    complete = {cid: correctness([r for r in rs if r.status == "done"], repeats)
                for cid, rs in wanted.items()
                if sum(r.status == "done" for r in rs) == expected}
    seed_id = finalists[0] if finalists else None
    if seed_id is None or complete.get(seed_id) is None:
        return None
    seed_bits, _ = complete[seed_id]
    paired_rows = {cid: found for cid, found in complete.items()
                   if found is not None and found[0].shape == seed_bits.shape}
    # the run part of every comparison, pooled over the table (`repeated`)
    noise = run_noise(list(paired_rows.values()))
    rows = []
    for cid in finalists:
        if cid not in paired_rows:
            continue
        bits, run_ids = paired_rows[cid]
        trained = [float(r.metrics["epochs"]) for r in wanted[cid]
                   if r.status == "done" and "epochs" in r.metrics]
        rows.append(Row(candidates[cid], accuracy_interval(bits, run_ids),
                        None if cid == seed_id else compare_repeated(bits, seed_bits, run_ids,
                                                                     noise=noise),
                        int(bits.shape[0]), bits, run_ids,
                        float(np.mean(trained)) if trained else None))
    return FinalsTable(tuple(rows), recipe, repeats, sum(len(rs) for rs in wanted.values()),
                       failed, wall_s, noise)


def decide(found: FinalsTable, margin_pt: float, cost: str,
           search_pick: Recommendation | None = None,
           bounds: Mapping[str, float] | None = None) -> Recommendation:
    """The recommendation read from the finals (the search's rule, on the finals' paired
    comparisons); its `reason` says so and names the search-time pick where it differs.
    With `bounds`, a seed over them is not recommended: the most accurate finalist within
    them is."""
    seed_row = found.rows[0]
    seed = seed_row.candidate
    better = [r for r in found.rows[1:] if r.vs_seed is not None and r.vs_seed.decision ==
              "better"]
    if better:
        reference = max(found.rows, key=lambda r: (r.accuracy.difference, -r.candidate.id))
        why = (f"finals: reference candidate {reference.candidate.id}, the most accurate, as "
               f"{len(better)} finalist(s) are better than the seed")
    else:
        reference = seed_row
        why = "finals: reference the seed, as no finalist is better than it"
    versus = {r.candidate.id: _versus(found, r, reference) for r in found.rows}
    good = [r for r in found.rows if r is reference or (
        versus[r.candidate.id] is not None and versus[r.candidate.id].noninferior(margin_pt))]
    chosen = min(good, key=lambda r: (cheapness(r.candidate, cost), r is not reference,
                                      r.candidate.id))
    within = feasible_ids([r.candidate for r in found.rows], bounds) if bounds else None
    if within is not None and chosen.candidate.id not in within:
        inside = [r for r in found.rows if r.candidate.id in within]
        if inside:
            over = "the seed" if chosen is seed_row else f"candidate {chosen.candidate.id}"
            chosen = max(inside, key=lambda r: (r.accuracy.difference, -r.candidate.id))
            why += (f"; {over} is over a bound, so the most accurate finalist within "
                    f"them (candidate {chosen.candidate.id})")
    why += (f"; the cheapest of {len(good)} of {len(found.rows)} architectures non-inferior "
            f"at {margin_pt:g} pt over {found.repeats} repeat(s)"
            + (f" of {found.recipe.folds}-fold cross-validation" if found.recipe.folds > 1
               else " on the validation split"))
    if search_pick is not None and search_pick.candidate is not None and \
            search_pick.candidate.id != chosen.candidate.id:
        why += f"; the search alone would have picked candidate {search_pick.candidate.id}"
    vs_ref = versus[chosen.candidate.id] if chosen is not reference else None
    return Recommendation(chosen.candidate, seed, chosen.vs_seed, None, margin_pt, why,
                          reference.candidate, vs_ref, cost, decided_on="finals",
                          bounds=dict(bounds or {}))


def _versus(found: FinalsTable, row: Row, reference: Row) -> Paired | None:
    """row - reference, paired over the finals' runs (None for the reference itself)."""
    if row is reference:
        return None
    if reference is found.rows[0]:
        return row.vs_seed
    return compare_repeated(row.bits, reference.bits, row.run_ids, noise=found.noise)


@dataclasses.dataclass(frozen=True)
class TakeHome:
    """The model a user takes home for the recommended architecture: the search's own
    weights of it, unless the finals' retrain of it (`retrain`: trained on the search's
    training split) is better on the search's validation split, which neither trained on,
    by the paired interval of the two on its examples. A difference inside that noise keeps
    the search's weights: on a split of 143 images one image is 0.7 points, and the
    retrain chosen on one image can be the worse model. The search's weights may have been
    chosen on that split (the seed's best round, the most accurate child), which only
    favours keeping them. Test accuracies are reported, never read here."""

    candidate: Scored
    retrain: Run | None  # None: not trained (take_home off) or it failed
    source: str  # "search" or "retrain"
    reason: str

    @property
    def run(self) -> Run | None:
        """The finals run whose weights are taken home (None: the search's own)."""
        return self.retrain if self.source == "retrain" else None

    @property
    def test_correct(self) -> np.ndarray | None:
        """Which test examples the model taken home gets right (None: not evaluated)."""
        text = self.run.metrics.get("test_correct") if self.run is not None else None
        return examples.from_text(text, "take-home test_correct") if text else None

    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics of exactly the weights taken home: the retrain's (with the
        candidate's costs), else the candidate's own."""
        if self.run is None:
            return dict(self.candidate.metrics)
        return retrain_metrics(self.candidate, self.run)


def retrain_metrics(candidate: Scored, run: Run) -> dict[str, Any]:
    """The metrics of a finals retrain of `candidate`: the run's own, with the candidate's
    costs."""
    costs = {k: v for k, v in candidate.metrics.items()
             if k not in TRAINING_METRICS and not k.startswith("fit_")}
    return {**costs, **run.metrics}


# What a candidate's training measured of its own weights (the rest of its metrics are
# costs, the same for any weights of its architecture, and timings the retrain measures
# again; `fit_*` describe the fit before it trained): a retrain drops all of them.
TRAINING_METRICS = frozenset({
    "accuracy", "loss", "test_accuracy", "test_loss", "val_examples", "test_examples",
    "val_correct", "test_correct", "start_accuracy", "epochs", "steps", "curve", "rounds",
    "best_round", "round_accuracies", "rounds_stopped", "arrived_trained"})


def take_home_choice(candidate: Scored, retrain: Run | None, repeated: bool = False,
                     searched_correct: np.ndarray | None = None) -> TakeHome:
    """Which trained model of `candidate` to take home (see `TakeHome`); `repeated`: no
    retrain was trained, as it would have repeated the search's training exactly;
    `searched_correct`: which validation examples the search's weights got right, in the
    split's order (None: not recorded, as in a study written before they were kept)."""
    searched = candidate.accuracy
    again = retrain.metrics.get("accuracy") if retrain is not None else None
    if retrain is None or again is None or "test_accuracy" not in retrain.metrics:
        why = ("a retrain would repeat its search training exactly" if repeated
               else "no retrain to compare with")
        return TakeHome(candidate, retrain, "search", f"the search's own weights ({why})")
    if searched is None:
        return TakeHome(candidate, retrain, "retrain",
                        f"the finals' retrain, validation {float(again):.4f}: the search's "
                        f"weights have no validation accuracy")
    scores = f"{float(again):.4f} against {float(searched):.4f}"
    versus = _retrain_vs_search(retrain, searched_correct)
    if versus is None:
        return TakeHome(candidate, retrain, "search",
                        f"the search's own weights: on validation the finals' retrain scored "
                        f"{scores}, with no per-example results to pair them")
    if versus.decision == "better":
        return TakeHome(candidate, retrain, "retrain",
                        f"the finals' retrain, better on validation than the search's "
                        f"weights: {scores}, {versus.text()}")
    return TakeHome(candidate, retrain, "search",
                    f"the search's own weights, as the finals' retrain is not better on "
                    f"validation: {scores}, {versus.text()}")


def _retrain_vs_search(retrain: Run, searched_correct: np.ndarray | None) -> Paired | None:
    """The retrain against the search's weights on the validation examples both scored
    (None unless both were recorded on the same examples)."""
    if retrain.correct is None or searched_correct is None:
        return None
    mine = (retrain.correct if retrain.positions is None
            else retrain.correct[np.argsort(retrain.positions, kind="stable")])
    return paired.compare(mine, searched_correct) if paired.comparable(
        mine, searched_correct) else None
