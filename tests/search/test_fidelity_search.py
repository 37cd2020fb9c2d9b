"""Real multi-fidelity searches on digits: children stop at a rung or resume to the full
budget from their rung's checkpoint; every rung is in the study; a killed search resumes
with every candidate at its rung."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys

import pytest

from nas.search.execution.driver import Driver
from nas.search.reporting.report import to_csv, write_report
from nas.search.reporting.report_text import summary
from nas.search.store.study import Study
from nas.search.strategy.fidelity import FidelityConfig, RungResult, promotion
from tests.search._held_search import HELD, HOLD

RUNGS = {"rungs": (0.25,), "keep": 0.5, "parent_ratio": 0.0}
# digits: 1437 training images, 1294 once search.validation_fraction (0.1) holds 143 out;
# batch 64: 20.2 steps per epoch
RUNG_STEPS, FULL_STEPS = 5, 10


def eval_steps(workdir, cid):
    path = os.path.join(workdir, "candidates", str(cid), "train", "metrics.jsonl")
    with open(path) as f:
        return [r["step"] for r in map(json.loads, f) if "accuracy" in r]


def replay(study, fidelity):
    """Every recorded decision at rung 0 is what the rule gives for the results recorded
    before it (the rule sees results, never time)."""
    rows = sorted(((c, r) for c in study.candidates() for r in c.rungs if r["rung"] == 0),
                  key=lambda cr: cr[1]["recorded_at"])
    config = FidelityConfig.from_dict(fidelity)
    for i, (cand, row) in enumerate(rows):
        peers = [RungResult(c.id, r["accuracy"]) for c, r in rows[:i]]
        parent = study.get(cand.parent_id).accuracy
        promoted, _ = promotion(RungResult(cand.id, row["accuracy"]), peers, config, parent)
        assert row["decision"] == ("promoted" if promoted else "stopped"), (cand.id, row)


@pytest.mark.slow  # a search; the rung arithmetic and resume are tested without one
def test_children_stop_at_a_rung_or_resume_to_the_full_budget(tmp_path, search_config):
    workdir = str(tmp_path / "s")
    config = search_config(max_candidates=2, seed_epochs=0.5, fidelity=RUNGS, fit={"steps": 0})
    config.search.mutation.linear_p = 0.0  # cheaper proposals: this test is about rungs
    study = Driver(config, workdir).run(progress=False)
    seed, child = study.candidates()
    assert seed.status == "done" and seed.rungs == ()  # the seed trains its whole budget
    assert child.status == "done", child.error  # first at its rung: promoted
    assert [(r["rung"], r["epochs"], r["steps"], r["decision"]) for r in child.rungs] == [
        (0, 0.25, RUNG_STEPS, "promoted"), (1, 0.5, FULL_STEPS, "final")]
    assert child.extra_metrics["steps"] == FULL_STEPS
    # resumed from the rung's checkpoint: evaluated once at the rung, once at the end
    assert eval_steps(workdir, child.id) == [RUNG_STEPS, FULL_STEPS]
    assert not os.path.exists(os.path.join(workdir, "candidates", str(child.id), "rung0"))

    # A better peer at rung 0 (standing in for an earlier child): the next child, below
    # it, is not in the best half of its rung and stops there.
    conn = sqlite3.connect(os.path.join(workdir, "study.db"))
    conn.execute("INSERT INTO rungs(candidate_id, rung, epochs, accuracy, decision,"
                 " recorded_at) VALUES (?, 0, 0.25, 1.0, 'promoted', ?)", (seed.id, 0.0))
    conn.commit()
    conn.close()
    config.search.max_candidates = 3  # operational: may change on resume
    study = Driver(config, workdir).run(progress=False)
    last = study.candidates()[-1]
    assert last.status == "stopped", last.error
    assert [(r["rung"], r["steps"], r["decision"]) for r in last.rungs] == [
        (0, RUNG_STEPS, "stopped")]
    # below the inserted 1.0; above or below the first child, whichever its training gave
    ranking = re.search(r"rank [23] of 3 at this rung by accuracy \(best 1 go on\)",
                        last.rungs[0]["reason"])
    assert ranking, last.rungs[0]["reason"]
    assert (last.epochs, last.accuracy) == (0.25, last.rungs[0]["accuracy"])
    assert last.flops > 0 and os.path.isdir(last.checkpoint_path)
    assert eval_steps(workdir, last.id) == [RUNG_STEPS]  # never trained past its rung
    assert study.counts()["stopped"] == 1 and study.rung_counts() == {0: (0.25, 3),
                                                                      1: (0.5, 1)}
    assert last.id not in [c.id for c in study.best(5)]  # not a parent, not on the front
    text = summary(study)
    assert "stopped 1" in text and f"{last.id}" in text.split("stopped at a rung")[1]
    assert f"\n{last.id},{last.parent_id},{last.generation},stopped," in to_csv(study)
    assert ranking[0] in write_report(study).read_text()


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OVERRIDES = [
    "--config.search.finals.k=0",  # the finals have tests of their own
    "--config.train.total_epochs=0.5", "--config.train.ckpt_steps=2",
    "--config.train.log_training_steps=1000", "--config.search.max_candidates=3",
    "--config.train.schedule.warmup_steps=2", "--config.search.seed_epochs=0.5",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0",
    "--config.search.executor=inline", "--config.search.selection.min_acc=0.0",
    "--config.search.fidelity.keep=1.0", "--config.search.fidelity.parent_ratio=0.0",
    "--config.search.fidelity.rungs=(0.25,)", "--config.search.fidelity.cost=",
    "--config.search.mutation.linear_p=0.0", "--config.search.fit.steps=0",  # cheap proposals
]


def start_driver(workdir, *, hold=False):
    """`nas-search` on the digits; `hold`: it holds inside the first child's task at its
    last rung, and says so on stdout (tests/search/_held_search.py)."""
    config = os.path.join(ROOT, "tests", "search", "_held_search.py")
    command = [sys.executable, "-m", "nas.search.cli", f"--config={config}",
               f"--workdir={workdir}", "--noprogress", *OVERRIDES]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(HOLD, None)
    if hold:
        env[HOLD] = "1"
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, cwd=ROOT)


def wait_until_held(driver):
    """Returns once `driver` holds (its line on stdout); its output if it ends first."""
    seen = []
    for line in driver.stdout:
        if line.decode().strip() == HELD:
            return
        seen.append(line.decode())
    driver.wait()
    raise AssertionError("the driver ended before it held:\n" + "".join(seen)[-3000:])


def assert_none_lost(before, study):
    """Every candidate of `before` (id: Candidate, the study at the kill) is in `study` with
    its rung results, none recorded again or lost; or it was refused at its start after
    the kill (search.max_start_drop: its row leaves the table, its refusal stays), and the
    search went on to a later proposal in its place, as max_candidates counts no refusal."""
    after = {c.id: c for c in study.candidates()}
    refused = {r.candidate_id: r for r in study.refusals("start")}
    for cid, old in before.items():
        if cid in after:
            new = after[cid]
            assert new.rungs[:len(old.rungs)] == old.rungs, cid
            assert new.rung >= old.rung, cid
        else:
            assert cid in refused, f"candidate {cid} is lost: not in the study, not refused"
            assert not old.rungs, cid  # a child is refused at its start only
            assert max(after) > cid, cid


@pytest.mark.slow  # two driver processes and three candidates: minutes on 2 shared cores
def test_killed_search_resumes_with_every_candidate_at_its_rung(tmp_path):
    workdir = str(tmp_path / "study")
    drivers = []
    try:
        _kill_and_resume(workdir, drivers)
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
                driver.wait()


def _kill_and_resume(workdir, drivers):
    driver = start_driver(workdir, hold=True)
    drivers.append(driver)
    # killed inside a promoted child's task at its last rung: its steps taken, its
    # result not recorded
    wait_until_held(driver)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    killed = Study.load(workdir)
    before = {c.id: c for c in killed.candidates()}
    at_rung = [c for c in before.values() if c.rung == 1 and c.status == "running"]
    assert at_rung and at_rung[0].rungs[0]["decision"] == "promoted"

    driver = start_driver(workdir)
    drivers.append(driver)
    output = driver.communicate(timeout=900)[0].decode()  # a hang's guard only
    assert driver.returncode == 0, output[-3000:]
    study = Study.load(workdir)
    assert_none_lost(before, study)
    resumed = study.get(at_rung[0].id)
    assert resumed.status == "done" and resumed.attempts == 2  # re-queued once, at rung 1
    assert [r["decision"] for r in resumed.rungs] == ["promoted", "final"]
    assert resumed.extra_metrics["steps"] == FULL_STEPS
    steps = eval_steps(workdir, resumed.id)
    assert steps[0] == RUNG_STEPS and steps[-1] == FULL_STEPS
    children = [c for c in study.candidates() if c.parent_id is not None]
    assert len(children) == 2 and all(c.status == "done" for c in children)  # keep=1.0
    replay(study, {"rungs": [0.25], "keep": 1.0, "parent_ratio": 0.0})


@pytest.mark.slow  # trains a seed and one child in two rungs: 25-60 s on 2 shared cores
def test_external_worker_trains_a_child_rung_by_rung(tmp_path, search_config):
    from nas.search.execution.driver import Driver
    from nas.search.execution.study_worker import run_worker

    workdir = str(tmp_path / "w")
    config = search_config(max_candidates=2, seed_epochs=0.5, fidelity=RUNGS, fit={"steps": 0},
                           workers=0)
    config.search.mutation.linear_p = 0.0
    driver = Driver(config, workdir)
    driver.seed_population()
    assert run_worker(workdir, 1, worker="ext")[0].status == "done"
    child = driver.propose()
    assert child is not None
    first = run_worker(workdir, child, worker="ext")[0]  # to rung 0, then pending again
    assert (first.status, first.rung, first.worker, first.attempts) == ("pending", 1, None, 0)
    last = run_worker(workdir, child, worker="ext")[0]  # resumes to the full budget
    assert last.status == "done" and [r["decision"] for r in last.rungs] == ["promoted",
                                                                             "final"]
    assert [r["worker"] for r in last.rungs] == ["ext", "ext"]
    assert eval_steps(workdir, child) == [RUNG_STEPS, FULL_STEPS]
