"""The search decides on a validation split carved from the training split, and reports
the test split with its 95 % interval."""

import numpy as np
import pytest

from nas.search.strategy.noise_ties import NoiseTies
from nas.search.strategy.selection import Individual, SelectionConfig, select_parents
from nas.search.strategy.settings import decision_config, validate_search
from nas.stats import intervals
from nas.stats.intervals import wilson
from nas.train import data as data_lib
from nas.train.config import base_config


def _input(fraction):
    config = base_config()
    config.input.data.validation_fraction = fraction
    return config.input


def test_holdout_is_stratified_fixed_and_never_trained_on():
    inp = _input(0.1)
    train = data_lib.split_source(inp, "train", None)
    held = data_lib.split_source(inp, data_lib.HOLDOUT, None)
    assert not set(train.indices) & set(held.indices)
    assert len(train) + len(held) == len(data_lib.open_source("digits", "train", None))
    labels = np.bincount([held[i]["label"] for i in range(len(held))])
    everything = data_lib.open_source("digits", "train", None)
    per_class = np.bincount([everything[i]["label"] for i in range(len(everything))])
    assert np.all(np.abs(labels - 0.1 * per_class) <= 1)  # stratified
    again = data_lib.split_source(_input(0.1), data_lib.HOLDOUT, None)
    assert list(again.indices) == list(held.indices)  # the same for every run and seed


def test_holdout_needs_a_fraction():
    with pytest.raises(ValueError, match="validation_fraction"):
        data_lib.split_source(_input(0.0), data_lib.HOLDOUT, None)


def test_decision_config_selects_on_validation_and_reports_test(search_config):
    config = search_config()
    search = validate_search(config)
    train = decision_config(config.train, search)
    assert train.eval.data.split == data_lib.HOLDOUT
    assert train.eval.test_split == "test"
    assert train.input.data.validation_fraction == pytest.approx(0.1)
    assert decision_config(train, search).to_dict() == train.to_dict()  # idempotent


@pytest.mark.parametrize(
    "search, needle",
    [
        ({"validation_fraction": 0.0}, "select on the test split 'test'"),
        ({"validation_split": "test"}, "test split (train.eval.data.split)"),
        ({"validation_split": "train"}, "training split (train.input.data.split)"),
        ({"validation_fraction": 0.7}, "search.validation_fraction"),
    ],
)
def test_selecting_on_the_test_split_is_refused_in_one_line(search_config, search, needle):
    with pytest.raises(ValueError) as e:
        validate_search(search_config(**search))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_wilson_interval():
    low, high = wilson(0.98, 360)
    assert low < 0.98 < high and high - low == pytest.approx(0.03, abs=0.005)
    assert wilson(1.0, 50)[1] == 1.0 and wilson(1.0, 50)[0] < 1.0
    assert intervals.compare((0.986, 360), (0.981, 360)) == "within noise"
    assert intervals.compare((0.99, 2000), (0.90, 2000)) == "better"
    assert intervals.compare((0.80, 2000), (0.90, 2000)) == "worse"
    assert "n=360" in intervals.text(0.98, 360)
    with pytest.raises(ValueError, match="wilson: n"):
        wilson(0.5, 0)
    with pytest.raises(ValueError, match="wilson: accuracy"):
        wilson(1.5, 10)


def test_ties_inside_the_interval_prefer_the_cheaper():
    # 0.97 and 0.96 on 143 examples are inside one another's interval; 0.80 is not.
    ties = NoiseTies()
    ties.extend(np.array([0.96, 0.97, 0.80]), np.array([143.0, 143.0, 143.0]))
    assert ties.values().tolist() == [0.97, 0.97, 0.80]
    population = [
        Individual(1, 0.97, flops=100.0, params=10.0, examples=143),
        Individual(2, 0.96, flops=40.0, params=4.0, examples=143),
        Individual(3, 0.80, flops=10.0, params=1.0, examples=143),
    ]
    config = SelectionConfig(p_accuracy_only=0.0, top_n=1, min_to_select=1, balanced=False)
    picks = {select_parents(population, config, np.random.default_rng(i))[0] for i in range(8)}
    assert 1 not in picks  # dominated by the cheaper child it ties with
    exact = SelectionConfig(
        p_accuracy_only=0.0, top_n=1, min_to_select=1, balanced=False, noise_ties=False
    )
    assert any(
        select_parents(population, exact, np.random.default_rng(i))[0] == 1 for i in range(8)
    )
    with pytest.raises(ValueError, match="noise_ties"):
        SelectionConfig(noise_ties="yes")


def test_summary_shows_both_accuracies_and_never_calls_noise_better(tmp_path):
    from nas.search.reporting.report import to_csv
    from nas.search.reporting.report_text import summary
    from nas.search.store.study import Study

    study = Study.open(tmp_path)
    sizes = {"val_examples": 143, "test_examples": 360}
    for cid, (val, test, flops) in enumerate(
        [(0.965, 0.975, 100.0), (0.972, 0.986, 40.0), (0.60, 0.62, 10.0)], start=1
    ):
        study.add(f'{{"g": {cid}}}', parent_id=None if cid == 1 else 1)
        study.claim("w", cid)
        study.tell(
            cid, {"accuracy": val, "flops": flops, "test_accuracy": test, **sizes}, worker="w"
        )
    text = summary(study)
    assert "0.9860 [0.968, 0.994] n=360" in text and "0.9720 [" in text
    rows = {line.split()[0]: line for line in text.splitlines()[3:6]}
    assert "within noise" in rows["2"] and "better" not in rows["2"]  # 0.986 vs 0.975
    assert "worse" in rows["3"] and "seed" in rows["1"]
    assert "candidate 2 at 0.400 of the seed's FLOPs; on test: within noise" in text
    assert "test_accuracy" in to_csv(study).splitlines()[0]
