"""Training hyperparameters evolve with the architecture: a child
perturbs its parent's values within their ranges, reproducibly, and they are recorded."""

from __future__ import annotations

import json

import pytest

from nas.graph.serialize import graph_to_json
from nas.search.execution.driver import Driver
from nas.search.reporting.report import to_csv
from nas.search.reporting.report_text import summary
from nas.search.strategy import hparams
from nas.search.strategy.settings import SearchSettings, validate_search
from tests.train.helpers import tiny_graph

RANGES = {"lr": (1e-3, 4e-3), "wd": (1e-5, 1e-3), "child_lr": (2e-4, 1e-3)}
TRAIN = {"lr": 2e-3, "wd": 0.0}


def settings(**search):
    """The typed settings of a search section of these fields, the others at defaults."""
    return SearchSettings.from_stored({"train": {}, "search": search})


SEARCH = settings(hparams=RANGES, child_lr=5e-4)


def test_children_perturb_their_parents_values_within_range_reproducibly():
    seed = hparams.seed_values(TRAIN, SEARCH)
    assert seed == {"lr": 2e-3, "wd": 1e-5, "child_lr": 5e-4}  # wd 0 clipped up
    values, seen = seed, set()
    for proposal in range(40):  # a lineage 40 generations deep stays inside its ranges
        child = hparams.perturb(values, TRAIN, SEARCH, seed=7, proposal=proposal)
        assert child == hparams.perturb(values, TRAIN, SEARCH, seed=7, proposal=proposal)
        for name, (low, high) in RANGES.items():
            assert low <= child[name] <= high
            ratio = child[name] / values[name]
            assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.25) or \
                child[name] in (low, high)
        seen.add(tuple(child.values()))
        values = child
    assert len(seen) > 10  # it moves
    assert hparams.perturb(None, TRAIN, settings(), 7, 0) == {}  # off: nothing drawn
    other = [hparams.perturb(seed, TRAIN, SEARCH, seed=8, proposal=p) for p in range(8)]
    assert other != [hparams.perturb(seed, TRAIN, SEARCH, seed=7, proposal=p)
                     for p in range(8)]


def test_values_apply_to_the_candidates_training_config():
    config = {"lr": 5e-4, "wd": 0.0}
    values = {"lr": 3e-3, "wd": 2e-4, "child_lr": 8e-4}
    assert hparams.apply(config, values, True, SEARCH) == {"lr": 3e-3, "wd": 2e-4}
    assert hparams.apply(config, values, False, SEARCH) == {"lr": 8e-4, "wd": 2e-4}
    # a child at search.child_lr keeps it unless child_lr itself evolves
    assert hparams.apply(config, {"lr": 3e-3}, False, SEARCH)["lr"] == 5e-4
    assert hparams.apply(config, {"lr": 3e-3}, False, settings())["lr"] == 3e-3
    assert hparams.apply(config, None, False, SEARCH) is config


@pytest.mark.parametrize("bad, message", [
    ({"momentum": (0.8, 0.99)}, "search.hparams.momentum' is unknown"),
    ({"\n": (0.8, 0.99)}, "search.hparams.\\n' is unknown"),  # a newline, escaped
    ({"lr": (1e-2, 1e-3)}, "0 < low < high"),
    ({"lr": (0.0, 1e-3)}, "0 < low < high"),
    ({"wd": 1e-4}, "must be (low, high)"),
])
def test_bad_ranges_are_one_line(search_config, bad, message):
    with pytest.raises(ValueError) as e:
        validate_search(search_config(hparams=bad))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_search_records_each_candidates_values(tmp_path, search_config):
    path = tmp_path / "tiny.json"
    path.write_text(graph_to_json(*tiny_graph()))
    config = search_config(max_candidates=3, seed_epochs=0.1, seed_graph=str(path),
                           hparams={"lr": (1e-3, 4e-3), "child_lr": (2e-4, 1e-3)})
    config.train.total_epochs = 0.1
    study = Driver(config, str(tmp_path / "s")).run(progress=False)
    done = {c.id: c for c in study.candidates("done")}
    assert done[1].metrics["hparams"] == {"lr": 2e-3, "child_lr": 5e-4}
    children = [c for c in done.values() if c.parent_id is not None]
    assert children
    for child in children:
        parent = done[child.parent_id].metrics["hparams"]
        k = int(child.inheritance["init_path"].rsplit("/", 1)[1])  # its proposal counter
        expected = hparams.perturb(parent, config.train.to_dict(),
                                   SearchSettings.from_stored(study.config),
                                   int(config.search.seed), k)
        assert child.metrics["hparams"] == expected
        trained = json.loads((tmp_path / "s" / "candidates" / str(child.id) / "train" /
                              "config.json").read_text())
        assert trained["lr"] == pytest.approx(expected["child_lr"])  # it trained with them
    assert "training hyperparameters (search.hparams)" in summary(study)
    assert "child_lr=" in to_csv(study)
