"""A real driver process killed with SIGKILL resumes losing and duplicating nothing; the Ray
executor runs candidates on a local Ray cluster, and refuses children as an inline search
does."""

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from nas.search.execution.driver import Driver
from nas.search.store.study import Study
from tests.search.test_refusals import FIT_REFUSES, _choices, _refused

SEARCH_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs",
                             "digits_cnn_search.py")

OVERRIDES = [
    "--config.search.finals.k=0",  # the finals have tests of their own
    "--config.train.total_epochs=0.5", "--config.train.ckpt_steps=5",
    "--config.train.log_training_steps=1000", "--config.search.max_candidates=3",
    "--config.train.schedule.warmup_steps=2",
    "--config.search.executor=inline", "--config.search.selection.min_acc=0.0",
    "--config.search.fidelity.rungs=()",  # rungs: tests/search/test_fidelity_search.py
]


def start_driver(workdir, *extra):
    command = [sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
               f"--workdir={workdir}", "--noprogress", *OVERRIDES, *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for(condition, process, timeout=1800):
    """Returns once `condition()` holds; fails at once if `process` ends first. `timeout`
    is a hang's guard only: on a loaded machine the driver may take many minutes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(process.stdout.read().decode()[-3000:])
        time.sleep(0.2)
    raise AssertionError("timed out waiting for the driver")


def assert_turns_never_overlap(done):
    """The candidates' steps and evaluations held the device one after another."""
    turns = sorted((c.metrics["device_started_at"], c.metrics["device_finished_at"])
                   for c in done)
    assert all(start >= end for (_, end), (start, _) in itertools.pairwise(turns)), turns


def counts(workdir):
    try:
        return Study.load(workdir).counts()
    except ValueError:
        return {}


@pytest.mark.slow  # three driver processes, a 3-epoch seed: 3-10 minutes on 2 cores
def test_sigkill_at_several_points_then_resume(tmp_path):
    workdir = str(tmp_path / "study")
    # 1: kill while the seed model is training.
    driver = start_driver(workdir)
    train_dir = os.path.join(workdir, "candidates", "1", "train")
    wait_for(lambda: os.path.isdir(train_dir), driver)  # claimed, training started
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    # 2: kill right after the first candidate finished.
    driver = start_driver(workdir)
    wait_for(lambda: counts(workdir).get("done", 0) >= 1, driver)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = {c.id: c for c in Study.load(workdir).candidates("done")}
    # 3: run to the end.
    driver = start_driver(workdir)
    output = driver.communicate(timeout=600)[0].decode()
    assert driver.returncode == 0, output[-3000:]
    study = Study.load(workdir)
    final = study.candidates()
    assert len(final) == 3 and all(c.status in ("done", "failed") for c in final), output
    assert len({c.fingerprint for c in final}) == 3
    for cid, old in before.items():  # nothing finished was lost or trained again
        new = study.get(cid)
        assert (new.status, new.accuracy, new.finished_at, new.attempts) == (
            "done", old.accuracy, old.finished_at, old.attempts)
    assert study.get(1).attempts == 2  # the seed was re-queued once after the first kill


PIPELINED = ["--config.search.executor=local", "--config.search.pipeline_depth=2",
             "--config.search.prepare_ahead=1", "--config.search.max_candidates=4",
             "--config.search.seed_epochs=0.5",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0"]


@pytest.mark.slow
def test_sigkill_while_the_pipeline_prepares_a_child_then_resume(tmp_path):
    """Killed while one child trains and the next is being prepared beside it (two worker
    processes on one device), the search resumes: nothing finished is lost or trained
    again, the two interrupted children are trained once more, and it ends complete."""
    workdir = str(tmp_path / "study")
    driver = start_driver(workdir, *PIPELINED)
    wait_for(lambda: counts(workdir).get("running", 0) == 2, driver)
    driver.send_signal(signal.SIGKILL)  # at once: a wait here only lets one of them finish
    driver.wait()
    killed = Study.load(workdir)
    before = {c.id: c for c in killed.candidates("done")}
    interrupted = [c.id for c in killed.candidates("running")]
    assert len(interrupted) == 2
    driver = start_driver(workdir, *PIPELINED)
    output = driver.communicate(timeout=600)[0].decode()
    assert driver.returncode == 0, output[-3000:]
    study = Study.load(workdir)
    final = study.candidates()
    assert len(final) == 4 and all(c.status == "done" for c in final), output[-3000:]
    assert len({c.fingerprint for c in final}) == 4
    for cid, old in before.items():
        new = study.get(cid)
        assert (new.accuracy, new.finished_at, new.attempts) == (
            old.accuracy, old.finished_at, old.attempts)
    assert [study.get(cid).attempts for cid in interrupted] == [2, 2]


@pytest.fixture
def local_ray(monkeypatch):
    """Ray's temp folder for the local Ray an executor starts in this process, as for a user
    (and without JAX's fork warning), with no address of this user's to join; Ray is shut
    down and the folder removed after the test."""
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="nasst", dir="/tmp")  # short: Ray's socket paths
    monkeypatch.setenv("RAY_TMPDIR", temp)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        yield temp
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow  # a local Ray and a 3-candidate search
def test_ray_executor_runs_candidates_pipelined(tmp_path, search_config, local_ray):
    """Two tasks per slot: while one trains the next child is prepared in another task, and
    the two take turns on the device (their steps and evaluations never overlap). Ray's
    session file names a cluster that ended without `ray stop` (nothing answers there): the
    search starts its own local Ray instead of joining it."""
    import socket

    os.makedirs(os.path.join(local_ray, "ray"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with open(os.path.join(local_ray, "ray", "ray_current_cluster"), "w") as f:
        f.write(f"127.0.0.1:{dead}")
    config = search_config(executor="ray", max_candidates=3, pipeline_depth=2,
                           prepare_ahead=1)
    study = Driver(config, str(tmp_path / "ray")).run(progress=False)
    done = study.candidates("done")
    assert len(done) == 3, [c.error for c in study.candidates()]
    assert done[1].parent_id == done[0].id
    assert all(c.worker.startswith("driver") for c in done)
    assert_turns_never_overlap(done)


@pytest.mark.slow  # a local Ray and two 3-candidate searches, one of them inline
def test_a_child_refused_in_a_ray_task_gives_its_slot_away_as_inline(tmp_path, search_config,
                                                                      local_ray):
    """Children that cannot fit their parent are refused in their Ray task: each refusal is
    recorded with its kind and cause, takes no candidate's slot, and the search proposes,
    refuses and trains what the same search does inline."""
    runs = {}
    for executor in ("ray", "inline"):
        config = search_config(max_candidates=3, seed_epochs=0.1, fit=FIT_REFUSES,
                               mutation={"net2net_p": 0.5, "shrink_p": 0.5},
                               executor=executor, propose_ahead=0, prepare_ahead=0)
        config.train.total_epochs = 0.1
        runs[executor] = Driver(config, str(tmp_path / executor)).run(progress=False)
    ray, inline = runs["ray"], runs["inline"]
    done = ray.candidates("done")
    assert len(done) == len(ray.candidates()) == 3, [c.error for c in ray.candidates()]
    assert all(c.metrics.get("ray_train_s", 0) > 0 for c in done)  # each trained as a task
    refused = ray.refusals("start")
    assert refused  # the settings refuse some children, in their task
    for r in refused:
        assert r.kind in ("subgraph", "shrink") and r.cause.startswith("PoorFitError: ")
        assert "search.fit.max_error=1e-09" in r.cause
        assert r.candidate_id is not None and r.replaced_by is not None
        assert not ray.has_candidate(r.candidate_id)
    assert _refused(ray) == _refused(inline)
    assert _choices(ray) == _choices(inline)


@pytest.mark.slow
def test_external_workers_take_turns_on_their_device(tmp_path):
    """Two `nas-search worker`s beside a driver that only proposes: while one trains, the
    other prepares the next child, and their steps and evaluations never overlap."""
    workdir = str(tmp_path / "study")
    driver = start_driver(workdir, "--config.search.workers=0",
                          "--config.search.pipeline_depth=2", "--config.search.prepare_ahead=1",
                          "--config.search.max_candidates=4", "--config.search.seed_epochs=0.5",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0")
    workers = [subprocess.Popen([sys.executable, "-m", "nas.search.cli", "worker",
                                 f"--workdir={workdir}", "--wait_s=120"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for _ in range(2)]
    try:
        output = driver.communicate(timeout=480)[0].decode()
        for worker in workers:
            worker.communicate(timeout=120)
    finally:
        for process in (driver, *workers):
            process.kill()
    done = Study.load(workdir).candidates("done")
    assert len(done) == 4, output[-3000:]
    assert len({c.worker for c in done}) == 2
    assert_turns_never_overlap(done)
