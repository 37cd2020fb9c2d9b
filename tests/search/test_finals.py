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

from nas.search.execution.driver import Driver
from nas.search.execution.finals import Finals
from nas.search.reporting.report import summary, write_report
from nas.search.result import SearchResult
from nas.search.store.finals import FinalsStore
from nas.search.store.finals_table import answer, decide
from nas.search.store.recommend import margin_pt, recommend_cost
from nas.search.strategy.finals_config import FinalsConfig
from nas.train.checkpoint import load_variables
from tests.search.conftest import ROOT, dump_dom, headless_browser, tiny_search_config

FINALS = {"k": 1, "repeats": 1, "folds": 2, "epochs": 0.5}


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
    again = Finals(study, config.train, config.search)
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
    assert Finals(study, config.train, config.search).task(run).init_variables is None
    config.search.finals = {**FINALS, "start": "weights"}
    weights = Finals(study, config.train, config.search)
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


def test_exported_recommendation_is_the_take_home_model(finished, tmp_path):
    result = SearchResult.load(finished)
    found = answer(result.study)
    chosen = found.recommendation.candidate
    home = found.home[chosen.id]
    loaded = result.recommended
    assert loaded.info["take_home"]["run"] == home.name
    assert loaded.info["id"] == chosen.id
    expected = load_variables(home.checkpoint_path)
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, loaded.variables["params"],
                                            expected["params"])))


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
            FinalsConfig.from_dict(bad)


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
