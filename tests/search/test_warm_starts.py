"""Warm starts: several seeds, `Study.enqueue`, and `search.start_from` (a new study from
another's validation front, weights included), each on a real study on disk.

The default tests seed, enqueue and claim without training; the `slow` ones train on the
tiny digits and check what training made of it (both seeds trained and both chosen as
parents, the enqueued architecture trained before any proposal, the warm-started seeds
starting at their source's accuracy).
"""

import os
import shutil

import jax
import numpy as np
import pytest

import nas
from nas.graph.serialize import graph_to_json, load
from nas.io import write_candidate
from nas.mutation import fingerprint_at
from nas.search.execution.driver import Driver
from nas.search.store.study import Study
from nas.train.checkpoint import load_variables, save_variables
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables
from tests.search.conftest import TINY_IMAGE_SIZE

SHAPE = (1, TINY_IMAGE_SIZE, TINY_IMAGE_SIZE, 3)


def _small_graph(width=8, classes=10):
    graph, constants, _ = cnn.conv_net(in_features=width, out_features=32,
                                       num_classes=classes)
    return graph, constants


def _graph_file(tmp_path, name="small.json", **kw):
    graph, constants = _small_graph(**kw)
    path = tmp_path / name
    path.write_text(graph_to_json(graph, constants))
    return str(path)


def _same(a, b):
    return all(jax.tree.leaves(jax.tree.map(np.array_equal, a, b)))


def _files(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*")) if folder.exists() else []


# ----------------------------------------------------------------------------- several seeds


def test_two_seeds_are_both_seeds_in_order_and_the_first_is_the_single_seed(
        tmp_path, search_config):
    graph, constants = _small_graph()
    export = write_candidate(tmp_path / "small.zip", _dict(graph, constants),
                             parent_variables(graph, constants, image_size=TINY_IMAGE_SIZE),
                             input_shape=SHAPE[1:])
    single = Driver(search_config(), str(tmp_path / "one"))
    single.seed_population()
    driver = Driver(search_config(extra_seeds=(str(export),), seed_max_epochs=1.0),
                    str(tmp_path / "two"))
    driver.seed_population()
    first, second = driver.study.candidates()
    (alone,) = single.study.candidates()
    # the first seed is the single seed, unchanged: its row, its fingerprint
    assert (first.id, first.graph_json, first.fingerprint, first.inheritance) == (
        alone.id, alone.graph_json, alone.fingerprint, alone.inheritance)
    assert single.study.get_state("seeds", None) is None  # one seed's state as before
    assert second.parent_id is None and second.generation == 0
    assert second.fingerprint == fingerprint_at(graph, constants, SHAPE)
    assert _same(load_variables(second.inheritance["init_path"])["params"],
                 nas.load_candidate(export).variables["params"])
    assert driver.read_through() == 2  # the first proposal reads both seeds' results
    # each trains as the seed does (its rounds), first the first
    assert driver.study.claim("w").id == 1 and driver.task(1).rounds is not None
    assert driver.study.claim("w").id == 2 and driver.task(2).rounds is not None
    again = Driver(search_config(extra_seeds=(str(export),), seed_max_epochs=1.0),
                   str(tmp_path / "two"))
    again.seed_population()  # resumed: no seed is added again
    assert len(again.study.candidates()) == 2


def _dict(graph, constants):
    from nas.graph.serialize import graph_to_dict

    return graph_to_dict(graph, constants)


def test_both_seeds_are_in_the_pool_parents_are_drawn_from(tmp_path, search_config):
    driver = Driver(search_config(extra_seeds=(_graph_file(tmp_path),)), str(tmp_path / "s"))
    driver.seed_population()
    for cid, accuracy, flops in ((1, 0.8, 2e6), (2, 0.6, 1e5)):  # both on the front
        assert driver.study.claim("w").id == cid
        driver.study.tell(cid, {"accuracy": accuracy, "flops": flops, "params": flops / 100},
                          worker="w")
    done = driver.population()
    assert sorted(c.id for c in done) == [1, 2]
    drawn = {driver.choose_parent(done, np.random.default_rng([0, k])) for k in range(40)}
    assert drawn == {1, 2}


def test_a_second_seed_that_is_the_first_again_is_one_line(tmp_path, search_config):
    path = _graph_file(tmp_path)
    with pytest.raises(ValueError, match=r"^config field 'search.extra_seeds\[0\]': the same "
                                         r"architecture as config field 'search.seed_graph'"):
        Driver(search_config(seed_graph=path, extra_seeds=(path,)), str(tmp_path / "s"))
    assert not (tmp_path / "s").exists()


def test_a_bad_extra_seed_names_its_place(tmp_path, search_config):
    with pytest.raises(ValueError, match=r"search.extra_seeds\[0\].*cannot read"):
        Driver(search_config(extra_seeds=(str(tmp_path / "nope.json"),)), str(tmp_path / "s"))
    with pytest.raises(ValueError, match=r"search.extra_seeds\[0\].*outputs"):
        Driver(search_config(extra_seeds=(_graph_file(tmp_path, classes=7),)),
               str(tmp_path / "s"))
    assert not (tmp_path / "s").exists()


def _arrays(n=400):
    x = np.random.default_rng(0).integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)
    y = np.arange(n) % 10
    return x, y, x[:10], y[:10]


def test_run_search_takes_a_list_of_seeds_into_the_config(tmp_path, monkeypatch):
    from nas.search.api import prepare

    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    x, y = _arrays()[:2]
    small = _graph_file(tmp_path)
    kw = dict(workdir=str(tmp_path / "w"), max_candidates=3, config=None, overrides=None,
              loss=None, optimizer=None, augment=None, costs=None, callbacks=())
    prepared = prepare(["cnn", small], (x, y, x[:10], y[:10]), **kw)
    assert prepared.config.train.model_name == "cnn"
    assert prepared.config.search.seed_graph == ""
    assert tuple(prepared.config.search.extra_seeds) == (small,)
    one = prepare("cnn", (x, y, x[:10], y[:10]), **kw)
    assert tuple(one.config.search.extra_seeds) == ()
    with pytest.raises(ValueError, match=r"^seed\[1\]: expected a candidate"):
        prepare(["cnn", 3], (x, y, x[:10], y[:10]), **kw)
    with pytest.raises(ValueError, match=r"^seed: expected a model to start from"):
        prepare(None, (x, y, x[:10], y[:10]), **kw)
    assert not (tmp_path / "w").exists()


def test_the_command_line_takes_seed_graph_more_than_once(tmp_path):
    import subprocess
    import sys

    # in a process of its own: absl's flags are global, and nas-train defines --config too
    code = ("from nas.search import cli; "
            "cli.FLAGS(['nas-search', '--seed_graph=a.json', '--seed_graph=b.json']); "
            "print(cli._SEED_GRAPH.value)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['a.json', 'b.json']"


def test_the_command_line_seeds_and_start_from_mistakes_are_one_line(tmp_path):
    from tests.search.conftest import SEARCH_CONFIG, run_cli_probe

    small = _graph_file(tmp_path)
    cases = [([f"--seed_graph={small}", f"--seed_graph={tmp_path}/nope.json"],
              ["search.extra_seeds[0]", "nope.json"]),
             ([f"--config.search.start_from={tmp_path}/missing"],
              ["search.start_from", "missing: no such folder"])]
    results = run_cli_probe([{"argv": [f"--config={SEARCH_CONFIG}",
                                       f"--workdir={tmp_path}/new", *argv],
                              "cwd": str(tmp_path)} for argv, _ in cases])
    for (code, stderr), (_, needles) in zip(results, cases, strict=True):
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert code == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
        assert lines[0].startswith("nas-search: error: ")
        assert all(n in lines[0] for n in needles), lines[0]
    assert not (tmp_path / "new").exists()


# ----------------------------------------------------------------------------- enqueue


def test_an_enqueued_architecture_is_claimed_before_a_pending_child(tmp_path, search_config):
    driver = Driver(search_config(), str(tmp_path / "s"))
    driver.seed_population()
    seed = driver.study.claim("w")
    driver.study.tell(seed.id, {"accuracy": 0.5, "flops": 1e6, "params": 1e4}, worker="w")
    wide, wide_c = _small_graph(width=16)
    child = driver.study.add(graph_to_json(wide, wide_c), parent_id=seed.id,
                             fingerprint="child")  # a pending proposal
    graph, constants = _small_graph()
    variables = parent_variables(graph, constants, image_size=TINY_IMAGE_SIZE)
    queued = Study.load(tmp_path / "s").enqueue(graph, constants, variables=variables)
    assert queued == child + 1
    row = driver.study.get(queued)
    assert row.parent_id is None and row.status == "pending" and row.inheritance["enqueued"]
    assert _same(load_variables(row.inheritance["init_path"]), variables)
    assert driver.study.claim("w").id == queued  # trained next, before the proposal
    assert driver.task(queued).init_variables is not None
    assert driver.study.claim("w").id == child


def test_an_exported_candidate_is_enqueued_with_its_weights(tmp_path, search_config):
    driver = Driver(search_config(), str(tmp_path / "s"))
    driver.seed_population()
    graph, constants = _small_graph(width=4)
    variables = parent_variables(graph, constants, image_size=TINY_IMAGE_SIZE)
    path = write_candidate(tmp_path / "mine.zip", _dict(graph, constants), variables,
                           input_shape=SHAPE[1:])
    cid = driver.study.enqueue(nas.load_candidate(path))
    row = driver.study.get(cid)
    assert row.fingerprint == fingerprint_at(graph, constants, SHAPE)
    assert _same(load_variables(row.inheritance["init_path"])["params"], variables["params"])
    no_weights = driver.study.enqueue(str(_graph_file(tmp_path)))  # a graph JSON's path
    assert "init_path" not in driver.study.get(no_weights).inheritance


def test_bad_enqueues_are_one_line_and_write_nothing(tmp_path, search_config):
    empty = Study.create(tmp_path / "e", search_config().to_dict())
    graph, constants = _small_graph()
    with pytest.raises(ValueError, match=r"^enqueue: the study in .* has no seed yet"):
        empty.enqueue(graph, constants)
    driver = Driver(search_config(), str(tmp_path / "s"))
    driver.seed_population()
    before = _files(tmp_path / "s")
    study = Study.load(tmp_path / "s")
    seven, c7 = _small_graph(classes=7)
    with pytest.raises(ValueError, match=r"^enqueue: the architecture outputs 7 logits, "
                                         r"but dataset 'digits' has 10 classes"):
        study.enqueue(seven, c7)
    wrong = parent_variables(*_small_graph(width=4), image_size=TINY_IMAGE_SIZE)
    with pytest.raises(ValueError, match=r"^enqueue: variables: .* has shape"):
        study.enqueue(graph, constants, variables=wrong)
    first = load(driver.study.get(1).graph_json)
    with pytest.raises(ValueError, match=r"^enqueue: the architecture is already candidate 1"):
        study.enqueue(*first)
    with pytest.raises(ValueError, match=r"^enqueue: expected a candidate"):
        study.enqueue(42)
    assert len(study.candidates()) == 1 and _files(tmp_path / "s") == before


# ----------------------------------------------------------------------------- start_from


def _source_study(tmp_path, search_config):
    """A study with three done candidates, two on its validation front (accuracy against
    flops) and one behind it, each with weights on disk."""
    driver = Driver(search_config(), str(tmp_path / "src"))
    driver.seed_population()
    study = driver.study
    small, small_c = _small_graph()
    wide, wide_c = _small_graph(width=16)
    study.add(graph_to_json(small, small_c), parent_id=1,
              fingerprint=fingerprint_at(small, small_c, SHAPE))
    study.add(graph_to_json(wide, wide_c), parent_id=1,
              fingerprint=fingerprint_at(wide, wide_c, SHAPE))
    weights = {}
    for cid, accuracy, flops in ((1, 0.8, 3e6), (2, 0.6, 1e5), (3, 0.5, 2e6)):
        row = study.claim("w")
        graph, constants = load(row.graph_json)
        weights[cid] = parent_variables(graph, constants, seed=cid,
                                        image_size=TINY_IMAGE_SIZE)
        path = save_variables(str(tmp_path / "src" / f"w{cid}"), weights[cid])
        study.tell(cid, {"accuracy": accuracy, "flops": flops, "params": flops / 100},
                   checkpoint_path=path, worker="w")
    return study, weights


def test_start_from_seeds_a_new_study_with_the_front_and_its_weights(tmp_path, search_config,
                                                                     capsys):
    source, weights = _source_study(tmp_path, search_config)
    new = Driver(search_config(start_from=str(tmp_path / "src")), str(tmp_path / "new"))
    new.seed_population()
    seeds = new.study.candidates()
    assert [s.graph_json for s in seeds] == [source.get(1).graph_json,
                                             source.get(2).graph_json]  # most accurate first
    assert all(s.parent_id is None for s in seeds)
    for seed, cid in zip(seeds, (1, 2), strict=True):
        assert _same(load_variables(seed.inheritance["init_path"]), weights[cid])
        assert seed.fingerprint == source.get(cid).fingerprint
    again = Driver(search_config(start_from=str(tmp_path / "src")), str(tmp_path / "new"))
    again.seed_population()  # resumed: the front is not added again
    assert len(again.study.candidates()) == 2
    small = Driver(search_config(start_from=str(tmp_path / "src"), max_candidates=1),
                   str(tmp_path / "small"))
    capsys.readouterr()
    small.seed_population()  # every seed is in; the budget says how many train now
    assert len(small.study.candidates()) == 2
    assert capsys.readouterr().out.splitlines() == [
        "2 seeds, more than search.max_candidates=1: the first 1 train now, the others "
        "once max_candidates is raised"]


def test_start_from_with_a_bad_path_is_one_line_and_writes_nothing(tmp_path, search_config):
    (tmp_path / "plain").mkdir()
    cases = [(tmp_path / "missing", r"^search.start_from: .*missing: no such folder "
                                     r"\(expected the workdir of an earlier search\)$"),
             (tmp_path / "plain", r"^search.start_from: .*plain is not a study \(expected a "
                                   r"search's workdir, with study.db\)$")]
    for path, message in cases:
        with pytest.raises(ValueError, match=message):
            Driver(search_config(start_from=str(path)), str(tmp_path / "new"))
        assert not (tmp_path / "new").exists()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "study.db").write_bytes(b"not sqlite" * 100)
    with pytest.raises(ValueError, match=r"^search.start_from: .*foreign is not a study"):
        Driver(search_config(start_from=str(tmp_path / "foreign")), str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_start_from_another_input_shape_is_one_line(tmp_path, search_config):
    _source_study(tmp_path, search_config)
    config = search_config(start_from=str(tmp_path / "src"))
    config.train.input.image_size = 8
    with pytest.raises(ValueError, match=r"^search.start_from: the study in .* trained on "
                                         r"16x16x3 images, this search on 8x8x3 \(expected "
                                         r"the same input shape"):
        Driver(config, str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_run_search_with_start_from_and_no_seed_takes_the_sources_images(
        tmp_path, search_config, monkeypatch):
    from nas.search.api import prepare

    monkeypatch.setenv("NAS_DATA_DIR", str(tmp_path / "data"))
    _source_study(tmp_path, search_config)
    x, y = _arrays()[:2]
    kw = dict(workdir=str(tmp_path / "w"), max_candidates=3, config=None, loss=None,
              optimizer=None, augment=None, costs=None, callbacks=())
    prepared = prepare(None, (x, y, x[:10], y[:10]),
                       overrides={"search.start_from": str(tmp_path / "src")}, **kw)
    assert prepared.config.train.input.image_size == TINY_IMAGE_SIZE
    assert prepared.config.search.seed_graph == ""
    with pytest.raises(ValueError, match=r"^search.start_from: the study in .* trained on "
                                         r"16x16x3 images, this search on 8x8x3"):
        prepare(None, (x, y, x[:10], y[:10]), overrides={
            "search.start_from": str(tmp_path / "src"), "train.input.image_size": 8}, **kw)
    assert not (tmp_path / "w").exists()
    Driver(search_config(start_from=str(tmp_path / "src")), kw["workdir"]).seed_population()
    shutil.rmtree(tmp_path / "src")  # a resumed study no longer reads the earlier one
    again = prepare(None, (x, y, x[:10], y[:10]),
                    overrides={"search.start_from": str(tmp_path / "src")}, **kw)
    assert again.config.train.input.image_size == TINY_IMAGE_SIZE


# ----------------------------------------------------------------------------- trained


def _short(config):
    """Fewer steps per candidate (as the driver's reproducibility test): these train."""
    config.search.seed_epochs = 0.2
    config.train.total_epochs = 0.2
    return config


@pytest.fixture(scope="module")
def two_seed_search(tmp_path_factory):
    from tests.search.conftest import tiny_search_config

    folder = tmp_path_factory.mktemp("two_seeds")
    small = _graph_file(folder)
    config = _short(tiny_search_config(extra_seeds=(small,), max_candidates=4))
    return folder, config, Driver(config, str(folder / "s")).run(progress=False)


@pytest.mark.slow
def test_two_seeds_are_both_trained_and_both_parents(two_seed_search):
    _, config, study = two_seed_search
    rows = study.candidates()
    seeds = [c for c in rows if c.parent_id is None]
    assert [c.id for c in seeds] == [1, 2] and all(c.status == "done" for c in seeds)
    assert all(c.epochs and c.checkpoint_path for c in seeds)  # each trained as the seed is
    children = [c for c in rows if c.parent_id is not None]
    assert children and all(c.parent_id in {s.id for s in rows} for c in children)
    driver = Driver(config, str(study.workdir))  # resumed: the pool proposals draw from
    done = driver.population()
    drawn = {driver.choose_parent(done, np.random.default_rng([0, k])) for k in range(60)}
    assert {1, 2} <= drawn


@pytest.mark.slow
def test_start_from_starts_each_seed_at_its_sources_accuracy(two_seed_search, tmp_path):
    folder, config, source = two_seed_search
    from nas.search.execution.seeds import validation_front

    front = validation_front(source.candidates("done"), "flops")
    new = config.copy_and_resolve_references()
    new.search.extra_seeds = ()
    new.search.start_from = str(folder / "s")
    new.search.max_candidates = len(front)  # the seeds alone
    study = Driver(new, str(tmp_path / "new")).run(progress=False)
    seeds = study.candidates()
    assert [s.fingerprint for s in seeds] == [c.fingerprint for c in front]
    for seed, theirs in zip(seeds, front, strict=True):
        assert seed.parent_id is None and seed.status == "done"
        assert seed.extra_metrics["start_accuracy"] == pytest.approx(theirs.accuracy,
                                                                     abs=1e-6)


@pytest.mark.slow
def test_an_enqueued_architecture_trains_before_a_pending_proposal(two_seed_search,
                                                                   tmp_path):
    folder, config, _ = two_seed_search
    workdir = tmp_path / "s"
    shutil.copytree(folder / "s", workdir)
    more = config.copy_and_resolve_references()
    more.search.max_candidates = 6
    driver = Driver(more, str(workdir))
    child = driver.propose()  # a pending proposal, as a stopped search leaves one
    assert child is not None and driver.study.get(child).status == "pending"
    graph, constants = _small_graph(width=4)
    variables = parent_variables(graph, constants, image_size=TINY_IMAGE_SIZE)
    queued = Study.load(workdir).enqueue(graph, constants, variables=variables)
    order = []
    Driver(more, str(workdir)).run(progress=False, callbacks=[lambda c: order.append(c.id)])
    assert order[:2] == [queued, child]
    row = Study.load(workdir).get(queued)
    assert row.status == "done" and "start_accuracy" in row.extra_metrics


def test_a_study_from_before_these_fields_resumes_without_a_difference_named(
        tmp_path, search_config, caplog):
    import logging

    from nas.search.execution.seeds import open_study
    from nas.search.strategy.settings import validate_search

    config = search_config()
    validate_search(config)
    old = config.to_dict()
    for key in ("extra_seeds", "start_from"):
        del old["search"][key]
    study = Study.create(tmp_path, old)
    study.add(graph_to_json(*_small_graph()))
    with caplog.at_level(logging.WARNING):
        open_study(str(tmp_path), config)
    assert "ignored" not in caplog.text
    config.search.start_from = "elsewhere"  # a real difference is still named
    with caplog.at_level(logging.WARNING):
        open_study(str(tmp_path), config)
    assert "search.start_from" in caplog.text
