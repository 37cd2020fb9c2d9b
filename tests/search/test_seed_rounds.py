"""A seed trained before it has children: it trains in rounds while its
validation accuracy rises, never past its cap, and its curve lands in the study."""

from __future__ import annotations

import pytest

from nas.graph.serialize import graph_to_json
from nas.search.execution.driver import Driver
from nas.search.execution.task import Task
from nas.search.execution.worker import train_candidate
from nas.search.reporting.report_text import summary
from nas.search.strategy.settings import (
    candidate_train_config,
    read_settings,
    seed_rounds,
    validate_search,
)
from nas.train.rounds import Rounds, train_in_rounds
from tests.train.helpers import tiny_graph


def _scripted(finals, firsts=None):
    """A round runner whose round k ends at finals[k] (a count of calls, no training)."""
    calls = []

    def run_round(index, variables):
        calls.append(index)
        first = (firsts or finals)[index]
        return {"accuracy": finals[index]}, 2, f"weights{index}", [first, finals[index]]

    return run_round, calls


@pytest.mark.parametrize("finals, patience, cap, rounds, best", [
    ((0.4, 0.6, 0.7, 0.7, 0.9), 1, 5, 4, 3),  # stops at the first round without a gain
    ((0.4, 0.6, 0.7, 0.7, 0.9), 2, 5, 5, 4),  # patience 2 rides over one flat round
    ((0.4, 0.6, 0.7, 0.8, 0.9), 1, 3, 3, 2),  # still rising: stops at its cap
    ((0.5, 0.45, 0.44), 1, 3, 2, 0),  # worse: the best (first) round is kept
])
def test_rounds_go_on_while_the_validation_accuracy_rises(finals, patience, cap, rounds, best):
    run_round, calls = _scripted(finals)
    result = train_in_rounds(run_round, Rounds(cap, patience, 0.0))
    assert calls == list(range(rounds)) and result.rounds == rounds <= cap
    assert result.best_round == best and result.variables == f"weights{best}"
    assert result.metrics["accuracy"] == max(finals[:rounds])
    assert result.epochs == 2 * rounds and len(result.curve) == 2 * rounds


def test_a_gain_inside_min_gain_is_no_gain_and_a_trained_arrival_trains_once():
    run_round, calls = _scripted((0.80, 0.805, 0.9))
    result = train_in_rounds(run_round, Rounds(3, 1, 0.01))
    assert result.rounds == 2 and result.best_round == 1  # no gain, but the higher one
    run_round, calls = _scripted((0.90, 0.95), firsts=(0.895, 0.9))  # arrived trained
    result = train_in_rounds(run_round, Rounds(5, 1, 0.01), start="given")
    assert calls == [0] and "arrived trained" in result.stopped_because
    run_round, calls = _scripted((0.60, 0.75, 0.75), firsts=(0.3, 0.7, 0.75))  # untrained
    assert train_in_rounds(run_round, Rounds(5, 1, 0.01), start="given").rounds == 3


def test_bad_rounds_are_one_line():
    for kwargs, field in (({"max_rounds": 0}, "max_rounds"), ({"patience": 1.5}, "patience"),
                          ({"min_gain": 1.0}, "min_gain")):
        with pytest.raises(ValueError, match=f"rounds: {field}"):
            Rounds(**kwargs)


def test_seed_rounds_come_from_the_search_section(search_config):
    config = search_config(seed_epochs=1.0, seed_max_epochs=3.5, seed_patience=2,
                           seed_min_gain=0.01)
    search = read_settings(config)
    assert seed_rounds(config.train.to_dict(), search) == {
        "max_rounds": 3, "patience": 2, "min_gain": 0.01}
    assert seed_rounds(config.train.to_dict(), read_settings(search_config())) is None
    with pytest.raises(ValueError, match="search.seed_patience"):
        validate_search(search_config(seed_patience=0))
    for drop in (-0.1, 1.5):  # search.max_start_drop: a drop in accuracy, 0 to 1
        with pytest.raises(ValueError, match="search.max_start_drop"):
            validate_search(search_config(max_start_drop=drop))


def test_the_seed_trains_until_its_validation_stops_rising_and_not_past_its_cap(
        tmp_path, search_config):
    """Real training of a tiny CNN on digits, a quarter epoch a round, at most 4 rounds."""
    config = search_config(seed_epochs=0.25)
    search = read_settings(config)
    train = candidate_train_config(config.train.to_dict(), search, is_seed=True)
    graph, constants = tiny_graph()
    rounds = {"max_rounds": 4, "patience": 1, "min_gain": 0.0}
    metrics, _ = train_candidate(Task(1, train, graph_to_json(graph, constants),
                                      workdir=str(tmp_path / "seed"), rounds=rounds))
    finals = metrics["round_accuracies"]
    assert 1 <= metrics["rounds"] == len(finals) <= 4
    assert metrics["accuracy"] == max(finals) == finals[metrics["best_round"]]
    if metrics["rounds"] < 4:  # stopped early: its last round did not beat the best before
        assert finals[-1] <= max(finals[:-1])
    else:  # at its cap: every round before the last rose
        assert all(b > a for a, b in zip(finals[:-2], finals[1:-1], strict=True))
    assert len(metrics["curve"]) == metrics["rounds"]  # one evaluation per round here
    assert metrics["curve"][-1] == finals[-1]


def test_the_seeds_rounds_and_curve_are_in_the_study(tmp_path, search_config):
    path = tmp_path / "tiny.json"
    path.write_text(graph_to_json(*tiny_graph()))
    config = search_config(max_candidates=1, seed_epochs=0.25, seed_max_epochs=0.75,
                           seed_graph=str(path))
    study = Driver(config, str(tmp_path / "s")).run(progress=False)
    seed = study.get(1)
    assert 1 <= seed.metrics["rounds"] <= 3
    assert len(seed.metrics["curve"]) == seed.metrics["rounds"]
    assert seed.metrics["epochs"] >= 0 and seed.metrics["rounds_stopped"]
    line = next(ln for ln in summary(study).splitlines() if ln.startswith("the seed trained"))
    assert f"in {seed.metrics['rounds']} round(s)" in line
