"""The finals: the seed and the finalists trained alike, the recommendation read from them,
the take-home model, and a second call that trains nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from nas.io import examples
from nas.search.execution.driver import Driver
from nas.search.execution.finals import Finals
from nas.search.reporting.report import write_report
from nas.search.reporting.report_text import summary
from nas.search.result import SearchResult
from nas.search.store.finals import FinalsStore, answer
from nas.search.store.study import Study
from nas.search.strategy.finals_rules import (
    Run,
    choose_finalists,
    decide,
    on_front,
    take_home_choice,
)
from nas.search.strategy.recommend import Comparisons, margin_pt, recommend_cost
from nas.search.strategy.settings import (
    FinalsConfig,
    SearchSettings,
    recipe,
    repeats_the_search,
    trained_repeats,
)
from nas.train.checkpoint import load_variables
from tests.search.conftest import ROOT, dump_dom, headless_browser, tiny_search_config

# epochs: the seed's (0.5, one round); one repeat however few degrees of freedom it leaves
FINALS = {"k": 1, "repeats": 1, "folds": 2, "min_run_df": 0}


def finals_config(**finals):
    return tiny_search_config(max_candidates=2, finals={**FINALS, **finals})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("finals"))
    Driver(finals_config(), workdir).run(progress=False)
    return workdir


def run_configs(workdir: str) -> dict[str, dict]:
    folder = os.path.join(workdir, "finals")
    return {name: json.load(open(os.path.join(folder, name, "train", "config.json")))
            for name in sorted(os.listdir(folder))}


def test_seed_and_finalists_train_alike(finished):
    study = SearchResult.load(finished).study
    runs = FinalsStore(study.path).runs(kind="finals")
    finalists = sorted({r.candidate_id for r in runs})
    assert len(finalists) == 2 and finalists[0] == 1  # the seed and one child
    assert all(r.status == "done" for r in runs) and len(runs) == 2 * 2
    configs = run_configs(finished)
    for repeat in range(1):
        for fold in range(2):
            alike = [configs[f"finals-{cid}-r{repeat}-f{fold}"] for cid in finalists]
            for key in ("seed", "total_epochs", "lr"):
                assert len({json.dumps(c[key]) for c in alike}) == 1, key
            assert len({json.dumps(c["input"]["data"]) for c in alike}) == 1
            assert alike[0]["input"]["data"]["fold"] == fold
            assert alike[0]["eval"]["test_split"] == ""  # the finals never read test
    # a second repeat: its own seed and folds, the same for every architecture
    config = finals_config(repeats=2)
    again = Finals(study, config.train, SearchSettings.from_stored(config))
    second = [again.task(dataclasses.replace(runs[0], candidate_id=cid, repeat=1))
              .train_config for cid in finalists]
    assert second[0]["seed"] == second[1]["seed"] == configs["finals-1-r0-f0"]["seed"] + 1
    assert second[0]["input"]["data"] == second[1]["input"]["data"]
    assert second[0]["input"]["data"]["fold_seed"] != \
        configs["finals-1-r0-f0"]["input"]["data"]["fold_seed"]
    # every example of the training split predicted once per repeat, by its fold
    for cid in finalists:
        for repeat in range(1):
            positions = np.concatenate([r.positions for r in runs
                                        if r.candidate_id == cid and r.repeat == repeat])
            assert np.array_equal(np.sort(positions), np.arange(positions.size))


def test_runs_start_from_scratch_unless_asked_for_weights(finished):
    study = SearchResult.load(finished).study
    config = finals_config()
    child = next(c for c in study.candidates("done") if c.parent_id is not None)
    run = next(r for r in FinalsStore(study.path).runs(kind="finals")
               if r.candidate_id == child.id)
    search = SearchSettings.from_stored(config)
    assert Finals(study, config.train, search).task(run).init_variables is None
    config.search.finals = {**FINALS, "start": "weights"}
    weights = Finals(study, config.train, SearchSettings.from_stored(config))
    task = weights.task(run)
    expected = load_variables(child.checkpoint_path)
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, task.init_variables, expected)))
    # from weights: each trains to the same total epochs as the most trained lineage
    seed = study.get(1)
    total = weights.lineage_epochs(child) + weights.epochs(child)
    assert total == pytest.approx(weights.lineage_epochs(seed) + weights.epochs(seed))
    assert weights.recipe.folds == 1  # weights saw the folds: the validation split decides


def test_recommendation_is_what_the_finals_table_decides(finished):
    study = SearchResult.load(finished).study
    found = answer(study)
    assert found.table is not None and len(found.table.rows) == 2
    decided = decide(found.table, margin_pt(study.config), recommend_cost(study.config))
    assert found.recommendation.candidate.id == decided.candidate.id
    assert found.recommendation.reason.startswith("finals:")
    text = summary(study)
    assert "finals (1 repeat(s)" in text and "finals cost: 4 trainings" in text
    assert "recommended: " in text and "taken home" in text


FINALS_PROBE = """<script>
  var section = document.getElementById('finals');
  var box = section ? section.getBoundingClientRect() : {width: 0, height: 0};
  var rows = section ? Array.from(section.querySelectorAll('table tr')).map(function(r){
    return Array.from(r.cells).map(function(c){ return c.textContent; }).join('|'); }) : [];
  document.body.setAttribute('data-finals', JSON.stringify(
      {shown: box.width > 0 && box.height > 0, rows: rows,
       text: section ? section.textContent : ''}));
</script></body>"""


@pytest.mark.skipif(headless_browser() is None, reason="no headless browser (chromium) "
                    "installed; .ci/run installs one")
def test_the_report_page_shows_the_finals_table_in_a_browser(finished, tmp_path):
    """Rendered by chromium: a finals section with a header and one row per architecture
    (the seed and the finalist), each with its accuracy interval, and what they cost."""
    import html

    study = SearchResult.load(finished).study
    page = write_report(study).read_text()
    path = tmp_path / "probe.html"
    path.write_text(page.replace("</body>", FINALS_PROBE))
    found = re.search(r'data-finals="([^"]*)"', dump_dom(headless_browser(), path))
    probe = json.loads(html.unescape(found.group(1)))
    table = answer(study).table
    assert probe["shown"] and len(probe["rows"]) == 1 + len(table.rows) == 3, probe
    assert all(re.search(r"\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]", r) for r in probe["rows"][1:])
    assert "4 trainings" in probe["text"], probe["text"]


def test_finals_train_as_long_as_the_seed_trained(finished):
    """The seed's rule: every run trains the epochs of all the seed's rounds in the search,
    from scratch; a seed that arrived trained gives no count, so they train on from weights."""
    study = SearchResult.load(finished).study
    seed = study.get(1)
    configs = run_configs(finished)
    assert {c["total_epochs"] for c in configs.values()} == {0.5}
    assert seed.metrics.get("rounds", 1) * 0.5 == 0.5
    search = SearchSettings.from_stored(finals_config())
    train = finals_config().train.to_dict()
    three_rounds = recipe(FinalsConfig(), train, dataclasses.replace(search, seed_epochs=3.0), 1437,
                          {"rounds": 3, "epochs": 9})
    assert (three_rounds.epochs, three_rounds.start, three_rounds.folds) == (9.0, "scratch", 3)
    arrived = recipe(FinalsConfig(), train, dataclasses.replace(search, seed_epochs=3.0), 1437,
                     {"rounds": 1, "arrived_trained": True})
    assert (arrived.epochs, arrived.start, arrived.folds) == (3.0, "weights", 1)
    # trained as it arrived (its start within seed_min_gain of its end), though its first
    # epochs strayed and it trained a second round
    came = recipe(FinalsConfig(), train,
                  dataclasses.replace(search, seed_epochs=3.0, seed_min_gain=0.01), 1437,
                  {"rounds": 2, "start_accuracy": 0.994, "accuracy": 1.0})
    assert came.start == "weights"
    untrained = recipe(FinalsConfig(), train, dataclasses.replace(search, seed_epochs=3.0), 1437,
                       {"rounds": 2, "start_accuracy": 0.15, "accuracy": 0.99})
    assert (untrained.start, untrained.epochs) == ("scratch", 6.0)
    asked = recipe(FinalsConfig(epochs=5.0, start="scratch"), train, search, 1437,
                   {"rounds": 1, "arrived_trained": True})
    assert (asked.epochs, asked.start) == (5.0, "scratch")
    # the seed's retrain would train exactly what the search trained: it is not trained
    finals = Finals(study, finals_config().train, SearchSettings.from_stored(finals_config()))
    assert repeats_the_search(finals.recipe, seed, train, search.seed_epochs)
    assert not repeats_the_search(finals.recipe, study.get(2), train, search.seed_epochs)
    assert not repeats_the_search(three_rounds, seed, train, search.seed_epochs)
    kept = answer(study).take_home
    homes = FinalsStore(study.path).runs(kind="home")
    if kept.candidate.id == seed.id:
        assert homes == [] and "repeat its search training" in kept.reason


def test_the_repeats_give_the_interval_its_degrees_of_freedom():
    defaults = FinalsConfig()  # 6: two finalists and the seed over 3 folds have them
    assert trained_repeats(defaults, 2, 3) == 1
    assert trained_repeats(defaults, 1, 3) == 2  # a lone finalist: 2 x (6 - 1)
    assert trained_repeats(defaults, 2, 2) == 2  # 2 folds: 3 x (2 - 1) a repeat
    assert trained_repeats(FinalsConfig(min_run_df=4), 1, 3) == 1
    assert trained_repeats(FinalsConfig(repeats=3), 2, 3) == 3  # never fewer than asked
    assert trained_repeats(defaults, 1, 1) == 1  # the validation split: as asked
    assert trained_repeats(FinalsConfig(min_run_df=0), 1, 2) == 1


def test_a_fold_is_scored_once_and_never_read_before(finished):
    """Early stopping inside a fold never reads its held-out examples: a finals run trains
    a fixed count of epochs, in one round, evaluated on its fold only at its end, and the
    fold is what it does not train on."""
    study = SearchResult.load(finished).study
    config = finals_config()
    finals = Finals(study, config.train, SearchSettings.from_stored(config))
    from nas.train import data as data_lib

    for run in FinalsStore(study.path).runs(kind="finals"):
        task = finals.task(run)
        assert task.rounds is None and task.min_start_accuracy is None
        assert task.stop_epochs is None
        train = task.train_config
        assert train["eval"]["data"]["split"] == data_lib.FOLD
        assert train["eval"]["every_epochs"] >= train["total_epochs"]
        assert train["input"]["data"]["fold"] == run.fold
        assert run.metrics["epochs"] == 1 and run.correct.size == run.positions.size


def _run(name: str, correct: np.ndarray, test_accuracy: float) -> Run:
    return Run(name, 2, "home", 0, 0, "recipe", "done", np.arange(correct.size), correct,
               {"accuracy": float(np.mean(correct)), "test_accuracy": test_accuracy}, None,
               None)


def test_the_take_home_choice_reads_validation_never_test(finished):
    """The retrain is taken home only when better than the search's weights on validation
    beyond the paired noise, whatever either scores on test."""
    study = SearchResult.load(finished).study
    child = study.get(2)
    searched = study.correctness([2])[2]
    wrong = np.flatnonzero(~searched)
    assert wrong.size >= 8  # the tiny search leaves room to be better
    better = searched.copy()
    better[wrong] = True
    worse_on_test = take_home_choice(child, _run("home-2", better, 0.0), False, searched)
    assert worse_on_test.source == "retrain" and worse_on_test.run is not None
    assert worse_on_test.metrics["test_accuracy"] == 0.0  # its own, however bad
    assert "paired, better" in worse_on_test.reason
    one_more = searched.copy()
    one_more[wrong[0]] = True  # one image ahead: inside the noise, the search's weights
    ahead = take_home_choice(child, _run("home-2", one_more, 1.0), False, searched)
    assert ahead.source == "search" and ahead.run is None
    assert "paired, within noise" in ahead.reason
    assert take_home_choice(child, _run("home-2", searched, 1.0), False, searched
                            ).source == "search"
    # the search's per-example results unknown (an older study): its weights are kept
    unknown = take_home_choice(child, _run("home-2", better, 1.0))
    assert unknown.source == "search" and "no per-example results" in unknown.reason
    assert take_home_choice(child, None).source == "search"


def test_a_take_home_retrain_on_other_examples_is_not_paired(finished):
    study = SearchResult.load(finished).study
    searched = study.correctness([2])[2]
    other = take_home_choice(study.get(2), _run("home-2", np.ones(searched.size + 1, bool),
                                                1.0), False, searched)
    assert other.source == "search" and "no per-example results" in other.reason


def _test_accuracy(loaded) -> float:
    """The loaded model's accuracy on the test split, evaluated here."""
    from nas.train import data as data_lib
    from tests.search.conftest import TINY_IMAGE_SIZE

    data = data_lib.make_eval_data("digits", "test", None, TINY_IMAGE_SIZE, 128, 1)
    right = total = 0
    for batch in data:
        keep = batch["mask"] > 0
        predicted = np.asarray(loaded(batch["image"])).argmax(-1)
        right += int(np.sum((predicted == batch["label"]) & keep))
        total += int(keep.sum())
    return right / total


def test_the_recommended_model_is_what_its_metrics_describe(finished, tmp_path):
    """`result.recommended` holds the model taken home, and evaluated on test here it
    scores the test accuracy it records (either way: search weights or the retrain)."""
    import shutil

    result = SearchResult.load(finished)
    found = answer(result.study)
    kept = found.take_home
    assert kept is not None and kept.candidate.id == found.recommendation.candidate.id
    loaded = result.recommended
    assert loaded.info["id"] == kept.candidate.id
    assert loaded.metrics["accuracy"] == pytest.approx(kept.metrics["accuracy"])
    assert _test_accuracy(loaded) == pytest.approx(loaded.metrics["test_accuracy"], abs=1e-9)
    # a retrain better on validation is the one taken home, with its own metrics
    copy = tmp_path / "study"
    shutil.copytree(finished, copy)
    home = _retrained(str(copy), kept.candidate.id)
    store = FinalsStore(str(copy / "study.db"))
    store.record(home.name, metrics={**home.metrics, "accuracy": 1.0},
                 correct=np.ones_like(home.correct), positions=home.positions,
                 checkpoint_path=home.checkpoint_path)
    store.close()
    again = SearchResult.load(copy)
    retrained = again.recommended
    assert retrained.info["take_home"]["run"] == home.name
    expected = load_variables(home.checkpoint_path)
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, retrained.variables["params"],
                                            expected["params"])))
    assert retrained.metrics["test_accuracy"] == home.metrics["test_accuracy"]
    assert _test_accuracy(retrained) == pytest.approx(home.metrics["test_accuracy"], abs=1e-9)
    assert "taken home for candidate" in again.summary()


def _retrained(workdir: str, candidate_id: int) -> Run:
    """The finals' retrain of `candidate_id` in the study at `workdir`, trained here when
    the finals skipped it (the seed, whose retrain would repeat its search training)."""
    from nas.search.execution.executors import make_executor
    from nas.search.store.finals import run_name

    study = SearchResult.load(workdir).study
    config = finals_config()
    finals = Finals(study, config.train, SearchSettings.from_stored(config))
    key = finals.recipe.to_json()
    finals.store.plan([(run_name("home", candidate_id), candidate_id, "home", 0, 0, key)])
    executor = make_executor("inline", workers=1, ray_address=None, hard_timeout_s=0.0)
    for run in finals.store.runs(key, kind="home"):
        if run.status == "pending":
            executor.submit(finals.task(run))
            for outcome in executor.poll(0):
                finals.record(outcome)
    finals.close()
    return next(r for r in FinalsStore(study.path).runs(key, kind="home")
                if r.candidate_id == candidate_id)


def _front_study(path) -> Study:
    """Seed 1 (0.90 at FLOPs 100); 2: 0.90 at 50 (on the front); 3: 0.88 at 60 (beaten
    by 2, cheaper and as accurate); 4: 0.86 at 20 (the cheapest, on the front); 5: 0.95
    at 120 (the most accurate)."""
    n = 200
    rng = np.random.default_rng(0)
    seed_right = rng.random(n) < 0.9
    study = Study.create(path, {"search": {"selection": {"noninferiority_pt": 5.0}}})
    for parent, accuracy, flops in ((None, 0.90, 100.0), (1, 0.90, 50.0), (1, 0.88, 60.0),
                                    (1, 0.86, 20.0), (1, 0.95, 120.0)):
        right = seed_right.copy()
        flip = rng.choice(n, 12, replace=False)
        right[flip] = rng.random(12) < accuracy
        cid = study.add(f'{{"graph": {flops}}}', parent_id=parent)
        study.claim("w", cid)
        study.tell(cid, {"accuracy": accuracy, "flops": flops, "params": flops,
                         "val_examples": n, "val_correct": examples.to_text(right)},
                   worker="w")
    return study


def test_finalists_are_the_cheapest_on_the_validation_front(tmp_path):
    study = _front_study(tmp_path / "s")
    done = study.candidates("done", with_graphs=False)
    pairs = Comparisons.of(study)
    chosen = [c.id for c in choose_finalists(done, pairs, 2, 5.0, "flops")]
    assert chosen == [1, 4, 2, 5]  # seed, the front cheapest first, then the most accurate
    assert [c.id for c in choose_finalists(done, pairs, 3, 5.0, "flops")] == [1, 4, 2, 5]
    # a front shorter than k: the cheapest others fill it
    assert [c.id for c in choose_finalists(done, pairs, 4, 5.0, "flops")] == [1, 4, 2, 5, 3]
    assert on_front(done, "flops") == {2, 4, 5}  # the seed is beaten by 2


def test_a_child_as_costly_as_the_seed_and_less_accurate_is_no_extra_finalist(tmp_path):
    """The extra finalist is the most accurate child that could be recommended over the
    seed: cheaper than it, or more accurate on validation."""
    study = _front_study(tmp_path / "s")
    pairs = Comparisons.of(study)

    def finalists(accuracy, k=2):
        done = [c if c.id != 5 else dataclasses.replace(c, accuracy=accuracy)
                for c in study.candidates("done", with_graphs=False)]
        return [c.id for c in choose_finalists(done, pairs, k, 5.0, "flops")]

    assert finalists(0.89) == [1, 4, 2]  # 5 (120 FLOPs) now below the seed's 0.90
    assert finalists(0.95) == [1, 4, 2, 5]  # above it: a possible reference
    # k=1: the front's cheapest (4), then the most accurate child cheaper than the seed (2)
    assert finalists(0.89, k=1) == [1, 4, 2]


def test_a_second_call_trains_nothing(finished):
    study = SearchResult.load(finished).study
    before = {r.name: r.metrics for r in FinalsStore(study.path).runs()}
    driver = Driver(finals_config(), finished)
    assert driver.finished()
    driver.run(progress=False)
    after = {r.name: r.metrics for r in FinalsStore(study.path).runs()}
    assert after == before


def test_a_study_from_before_the_finals_has_no_runs_and_reads_none(tmp_path):
    """A study written before the finals existed has no finals table: reading it (read-only,
    as a report does) finds no runs instead of failing; writing creates the table."""
    from nas.search import Study

    study = Study.create(tmp_path / "s", finals_config())
    assert FinalsStore(study.path, read_only=True).runs() == []
    store = FinalsStore(study.path)
    store.plan([("finals-1-r0-f0", 1, "finals", 0, 0, "recipe")])
    assert [r.status for r in FinalsStore(study.path, read_only=True).runs()] == ["pending"]


def test_bad_finals_settings_are_one_line():
    for bad, field in (({"k": -1}, "k"), ({"start": "warm"}, "start"),
                       ({"repeats": 0}, "repeats"), ({"nope": 1}, "nope")):
        with pytest.raises(ValueError, match=f"search.finals.{field}"):
            FinalsConfig.from_dict(bad, "search.finals.")


@pytest.mark.slow  # a search in a subprocess killed during its finals, then resumed
def test_sigkill_during_the_finals_loses_nothing_and_trains_nothing_twice(tmp_path):
    workdir = str(tmp_path / "study")
    script = ("import sys; sys.path.insert(0, sys.argv[1]);"
              "from tests.search.test_finals import finals_config;"
              "from nas.search.execution.driver import Driver;"
              "Driver(finals_config(), sys.argv[2]).run(progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", script, ROOT, workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 1800  # a safety net: the wait ends on the study's state
    done_before: dict[str, object] = {}
    while not done_before:
        assert proc.poll() is None and time.monotonic() < deadline, "no finals run finished"
        db = os.path.join(workdir, "study.db")
        if os.path.isfile(db):
            done_before = {r.name: r.metrics for r in FinalsStore(db, read_only=True).runs()
                           if r.status == "done"}
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {r.name: r.metrics for r in FinalsStore(os.path.join(workdir, "study.db"))
                   .runs() if r.status == "done"}
    Driver(finals_config(), workdir).run(progress=False)
    runs = FinalsStore(os.path.join(workdir, "study.db")).runs()
    assert all(r.status == "done" for r in runs)
    assert {n: m for n, m in ((r.name, r.metrics) for r in runs) if n in done_before} \
        == done_before
