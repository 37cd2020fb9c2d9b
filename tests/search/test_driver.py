"""End-to-end searches on digits: results land, failures are recorded, seeds reproduce."""

import math

import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.serialize import graph_to_json, load
from nas.search.execution.driver import Driver, SearchFailed
from nas.search.execution.study_worker import run_worker
from nas.search.reporting.report import write_report
from nas.search.store.study import SEEDS, SEEDS_ADDED, Study


def fingerprints(study):
    return [c.fingerprint for c in sorted(study.candidates(), key=lambda c: c.id)]


def _short_search_config(search_config):
    """Fewer steps (4 of batch 64 per candidate): this test runs the search twice."""
    config = search_config(seed_epochs=0.2)
    config.train.total_epochs = 0.2
    return config


def test_search_records_children_and_report(tmp_path, search_config):
    study = Driver(_short_search_config(search_config), str(tmp_path / "a")).run(progress=False)
    done = study.candidates("done")
    assert study.counts().get("done", 0) + study.counts().get("failed", 0) == 3
    assert len(done) >= 2, [c.error for c in study.candidates("failed")]
    for c in done:
        assert 0.0 <= c.accuracy <= 1.0 and c.flops > 0 and c.params > 0
        assert c.im_sec_core_train > 0 and c.checkpoint_path
    children = [c for c in done if c.parent_id is not None]
    assert children and all(c.inheritance["inherited"] for c in children)
    fitted = [c for c in children if c.inheritance.get("fit_pairs")]  # by their worker
    assert fitted and all(c.metrics["fit_seconds"] > 0 and math.isfinite(
        c.metrics["fit_mse_after"]) for c in fitted)
    assert len(set(fingerprints(study))) == len(study.candidates())
    report = write_report(study)
    assert report.exists() and (report.parent / "pareto.png").exists()

    # the same seed gives the same sequence of candidates
    again = Driver(_short_search_config(search_config), str(tmp_path / "b")).run(progress=False)
    assert fingerprints(again) == fingerprints(study)


def test_failing_candidates_are_recorded_and_search_goes_on(tmp_path, search_config):
    workdir = str(tmp_path / "s")
    config = search_config(max_candidates=3)

    Driver(config, workdir).seed_population()
    study = Study.load(workdir)
    # A graph that validates but cannot run: 10 digits classes are not divisible by 3.
    ops = [new_op("flat", OpType.FLATTEN, ["input"]),
           new_op("out", OpType.DENSE, ["flat"], op_kwargs={"features": "S:-1%7"})]
    broken = study.add(graph_to_json(new_graph(["input"], ["out"], ops), {}), generation=0)
    study = Driver(config, workdir).run(progress=False)
    assert study.get(broken).status == "failed"
    assert "not a factor" in study.get(broken).error
    assert study.counts()["done"] >= 1


def test_diverging_candidate_is_failed(tmp_path, search_config):
    config = search_config(max_candidates=1)
    config.train.lr = 1e12
    config.train.grad_clip_norm = 0.0
    with pytest.raises(SearchFailed, match="trained nothing.*non-finite"):
        Driver(config, str(tmp_path / "nan")).run(progress=False)  # exit non-zero in the CLI
    (seed,) = Study.load(tmp_path / "nan").candidates()
    assert seed.status == "failed"
    assert "non-finite" in seed.error or "nan" in seed.error.lower()


def test_external_worker_claims_next(tmp_path, search_config):
    workdir = str(tmp_path / "w")
    config = search_config(max_candidates=1)

    Driver(config, workdir).seed_population()
    [trained] = run_worker(workdir, worker="external", wait_s=0)
    assert trained.status == "done" and trained.worker == "external"
    assert math.isfinite(trained.accuracy)
    assert run_worker(workdir, wait_s=0) == []  # the search is finished

    # an export carries graph and weights; nas-train --graph starts from them
    from nas.train.checkpoint import load_variables
    from nas.train.cli import read_graph_file

    path = Study.load(workdir).export(trained.id, tmp_path / "export.json")
    graph, constants, variables, settings = read_graph_file(str(path))
    assert (graph, constants) == load(trained.graph_json)
    assert settings["total_epochs"] == config.search.seed_epochs
    final = load_variables(trained.checkpoint_path)
    assert jax_equal(variables, final)
    with pytest.raises(ValueError, match="no saved variables"):
        load_variables(str(tmp_path / "missing"))


def jax_equal(a, b):
    import jax
    import numpy as np

    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def test_bad_search_config(tmp_path, search_config):
    with pytest.raises(ValueError, match="search.max_candidatez"):
        Driver(search_config(max_candidatez=3), str(tmp_path / "x")).run()
    with pytest.raises(ValueError, match="search.executor"):
        Driver(search_config(executor="slurm"), str(tmp_path / "y")).run()


def test_nas_train_knows_no_study_and_worker_flags_are_checked(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "nas.train.cli", f"--study={tmp_path}"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "study" in result.stderr
    result = subprocess.run([sys.executable, "-m", "nas.search.cli", "worker",
                             f"--workdir={tmp_path}", "--candidate=0"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "candidate" in result.stderr


def test_children_over_the_parameter_bound_are_refused(tmp_path, search_config, caplog):
    """A bound below every child: each proposal is refused with its reason, nothing over
    the bound is fitted, stored or trained, and the search stops after the allowed failed
    proposals with the seed alone."""
    import logging

    config = search_config(max_candidates=3, max_params_ratio=0.01, max_proposal_failures=2)
    with caplog.at_level(logging.INFO):
        study = Driver(config, str(tmp_path / "s")).run(progress=False)
    assert [c.parent_id for c in study.candidates()] == [None]
    refusals = [r.getMessage() for r in caplog.records
                if "search.max_params_ratio=0.01" in r.getMessage()]
    assert len(refusals) == 2 and "times the seed's" in refusals[0]
    assert not list((tmp_path / "s").glob("inits/*")), "a refused child's weights were saved"


def test_bad_model_is_refused_before_the_study_exists(tmp_path, search_config):
    config = search_config()
    config.train.model_name = "bogus"
    with pytest.raises(ValueError, match="train.model_name.*bogus"):
        Driver(config, str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()


def test_a_new_studys_seeds_are_built_once_and_a_resumed_cut_seeding_builds_them(
        tmp_path, search_config, monkeypatch):
    from nas.search.execution import driver as driver_lib
    from nas.search.execution import seeds

    built = []
    real = seeds.seed_list

    def counted(train, search):
        built.append(1)
        return real(train, search)

    monkeypatch.setattr(seeds, "seed_list", counted)  # check_seed's
    monkeypatch.setattr(driver_lib, "seed_list", counted)  # the driver's, on resume
    driver = Driver(search_config(), str(tmp_path))
    assert len(built) == 1 and not (tmp_path / "inits").exists()  # checked, nothing added
    driver.seed_population()  # adds the seeds it checked
    assert len(built) == 1 and len(driver.study.candidates()) == 1
    driver.seed_population()  # seeded: nothing built or added
    assert len(built) == 1 and len(driver.study.candidates()) == 1
    again = Driver(search_config(), str(tmp_path))  # resumed: not checked, not built
    assert len(built) == 1
    again.study.set_state(SEEDS, 2)  # as if its seeding was cut after the first of two
    again.study.set_state(SEEDS_ADDED, 1)
    again.seed_population()  # built from its stored config (this one has one seed)
    assert len(built) == 2 and len(again.study.candidates()) == 1


def test_two_drivers_seeding_together_share_the_seed(tmp_path, search_config):
    first = Driver(search_config(), str(tmp_path))
    second = Driver(search_config(), str(tmp_path))  # both saw a study without candidates
    first.seed_population()
    second.study.candidates = lambda status=None: []  # it checked before the first added
    second.seed_population()  # already seeded: no DuplicateCandidateError
    assert len(first.study.candidates()) == 1


def test_empty_study_db_is_created_again(tmp_path, search_config):
    (tmp_path / "study.db").write_bytes(b"")
    driver = Driver(search_config(), str(tmp_path))
    driver.seed_population()
    assert len(Study.load(tmp_path).candidates()) == 1
