"""A parent whose saved weights are damaged or missing: a resumed search either fails before
it writes (the seed: every proposal needs it), leaving the study byte for byte as it was, or
goes on without that parent (marked unusable in the study, one warning naming the file).
The damage is real: files deleted or overwritten on disk."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nas.search.execution.driver import Driver, unusable_parents
from nas.search.store.study import Study
from tests.search.conftest import ROOT, SEARCH_CONFIG

FLAGS = [
    f"--config={SEARCH_CONFIG}",  # first: absl reads an override only after its file
    "--config.search.finals.k=0",  # the finals have tests of their own
    "--noprogress", "--config.train.total_epochs=0.5",
    "--config.train.ckpt_steps=0", "--config.train.log_training_steps=1000",
    "--config.train.schedule.warmup_steps=2", "--config.search.seed_epochs=0.5",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0",
    "--config.search.executor=inline", "--config.search.selection.min_acc=0.0",
    "--config.search.fidelity.rungs=()", "--config.search.pipeline_depth=1",
]


def nas_search(workdir: Path, max_candidates: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "nas.search.cli", f"--workdir={workdir}",
                           *FLAGS, f"--config.search.max_candidates={max_candidates}"],
                          capture_output=True, text=True, env=env, timeout=600)


def damage(path: str) -> None:
    """Overwrites every file of a saved checkpoint with bytes orbax cannot read."""
    for root, _, files in os.walk(path):
        for name in files:
            Path(root, name).write_bytes(b"\x00 not what was saved \xff")


def study_files(workdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in workdir.glob("study.db*")}


@pytest.mark.slow  # trains the seed in a subprocess, then two resumes: about a minute
def test_resume_with_a_damaged_or_missing_seed_changes_nothing(tmp_path):
    workdir = tmp_path / "study"
    first = nas_search(workdir, 1)
    assert first.returncode == 0, first.stderr[-3000:]
    study = Study.load(workdir)
    (seed,) = study.candidates()
    study.close()  # this process's connection, with its WAL files, is not what is compared
    before = study_files(workdir)
    assert list(before) == ["study.db"]
    kept = tmp_path / "kept"
    shutil.move(seed.checkpoint_path, kept)  # missing
    missing = nas_search(workdir, 2)
    shutil.copytree(kept, seed.checkpoint_path)
    damage(seed.checkpoint_path)  # damaged
    damaged = nas_search(workdir, 2)
    for run in (missing, damaged):
        lines = (run.stdout + run.stderr).strip().splitlines()
        assert run.returncode == 1 and len(lines) == 1, run.stdout + run.stderr
        assert lines[0].startswith("nas-search: error: the seed (candidate 1) cannot be a "
                                   "parent:") and seed.checkpoint_path in lines[0], lines
        assert study_files(workdir) == before


class NewestParent(Driver):
    """Always mutates the newest finished candidate (so the damaged one is chosen)."""

    def choose_parent(self, done, rng):
        return max(c.id for c in done)


@pytest.mark.slow  # trains a seed and two children in-process: about a minute
@pytest.mark.parametrize("fault", ["damaged", "missing"])
def test_a_damaged_or_missing_parent_is_marked_unusable_and_the_search_goes_on(
        tmp_path, search_config, caplog, fault):
    workdir = str(tmp_path / "study")
    Driver(search_config(max_candidates=2, fit={"steps": 0}), workdir).run(progress=False)
    child = Study.load(workdir).get(2)
    assert child.status == "done" and child.parent_id == 1
    if fault == "damaged":
        damage(child.checkpoint_path)
    else:
        shutil.rmtree(child.checkpoint_path)
    with caplog.at_level(logging.WARNING):
        study = NewestParent(search_config(max_candidates=3, fit={"steps": 0}),
                             workdir).run(progress=False)
    third = study.get(3)
    assert third.status == "done" and third.parent_id == 1  # the seed, the one usable parent
    assert list(unusable_parents(study)) == [2]
    assert child.checkpoint_path in unusable_parents(study)[2]
    warned = [r.getMessage() for r in caplog.records if "no longer used as a parent" in
              r.getMessage()]
    assert len(warned) == 1 and child.checkpoint_path in warned[0], warned


@pytest.mark.slow  # trains a seed and a child in-process: about a minute
def test_a_pending_child_whose_starting_weights_are_damaged_fails_alone(tmp_path,
                                                                        search_config):
    workdir = str(tmp_path / "study")
    Driver(search_config(max_candidates=1), workdir).run(progress=False)
    proposer = Driver(search_config(max_candidates=3), workdir)
    child = next(cid for cid in (proposer.propose() for _ in range(5)) if cid is not None)
    init = proposer.study.get(child).inheritance["init_path"]
    damage(init)  # while the search was stopped: the driver that resumes reads the files
    study = Driver(search_config(max_candidates=3), workdir).run(progress=False)
    failed = study.get(child)
    assert failed.status == "failed" and init in failed.error, failed.error
    assert failed.error.startswith("ValueError: saved variables at ")
    assert [c.parent_id for c in study.candidates("done")] == [None, 1]  # it went on
