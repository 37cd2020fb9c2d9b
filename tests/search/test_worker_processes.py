"""External `nas-search worker` processes with a driver, under SIGKILL, in any start order:
no candidate is trained by two workers at once, a killed worker's candidate is trained
once more (exactly once), and the search ends with every candidate asked for."""

import os
import signal
import subprocess
import sys
import time

import pytest

from nas.search.execution.driver import Driver
from nas.search.store.study import Study
from tests.search.conftest import ROOT, SEARCH_CONFIG

OVERRIDES = [
    "--config.search.finals.k=0",  # the finals have tests of their own
    "--config.train.total_epochs=0.5", "--config.train.ckpt_steps=0",
    "--config.train.log_training_steps=1000", "--config.train.schedule.warmup_steps=2",
    "--config.search.seed_epochs=0",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0", "--config.search.executor=inline",
    "--config.search.selection.min_acc=0.0", "--config.search.lease_s=30",
    "--config.search.fidelity.rungs=()",
]


def _env():
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def start_worker(workdir, *args):
    return subprocess.Popen([sys.executable, "-m", "nas.search.cli", "worker",
                             f"--workdir={workdir}", "--wait_s=240", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())


def start_driver(workdir, max_candidates, workers=0, *args):
    """workers=0: the driver proposes, the external workers train."""
    return subprocess.Popen([sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
                             f"--workdir={workdir}", "--noprogress", *OVERRIDES,
                             f"--config.search.max_candidates={max_candidates}",
                             f"--config.search.workers={workers}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env())


def wait_for(condition, *procs, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for p in procs:
            if p.poll() is not None and p.returncode != 0:
                raise AssertionError(p.stdout.read().decode()[-3000:])
        time.sleep(0.1)
    raise AssertionError("timed out")


def candidates(workdir):
    try:
        return Study.load(workdir).candidates()
    except ValueError:
        return []


def kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow  # two workers import jax and train: about 45 s on 2 cores
def test_killed_worker_candidate_is_trained_once_more_exactly_once(tmp_path, search_config):
    workdir = str(tmp_path / "study")
    # a long lease: the killed worker's claim is void at once (its process is gone), and a
    # live one never expires because the machine is slow
    config = search_config(max_candidates=1, seed_epochs=0.0, lease_s=30.0)
    Driver(config, workdir).seed_population()
    first = start_worker(workdir)
    train_dir = os.path.join(workdir, "candidates", "1", "train")
    wait_for(lambda: os.path.isdir(train_dir), first)  # claimed, training started
    kill(first)
    cand = Study.load(workdir).get(1)
    assert (cand.status, cand.attempts) == ("running", 1)
    second = start_worker(workdir)
    out = second.communicate(timeout=300)[0].decode()
    assert second.returncode == 0, out[-3000:]
    cand = Study.load(workdir).get(1)
    assert (cand.status, cand.attempts) == ("done", 2), cand.error
    assert cand.worker.startswith("worker@") and cand.worker.endswith(f":{second.pid}")
    assert "candidate 1: validation accuracy" in out


@pytest.mark.slow  # four processes and five candidates: about a minute on 2 cores
def test_workers_before_driver_and_driver_restarted_while_they_train(tmp_path):
    workdir = str(tmp_path / "study")
    workers = [start_worker(workdir) for _ in range(2)]
    for w in workers:  # each says it waits (its first line) before it starts waiting
        assert b"waiting up to 240 s for a study" in w.stdout.readline()
    assert not os.path.exists(os.path.join(workdir, "study.db"))  # workers wait, create nothing
    driver = start_driver(workdir, 5)

    def external_running():
        return any(c.status == "running" and c.worker.startswith("worker@")
                   for c in candidates(workdir))

    wait_for(external_running, driver, *workers)
    held = {c.id: c.worker for c in candidates(workdir) if c.status == "running"}
    kill(driver)
    driver = start_driver(workdir, 5)
    out = driver.communicate(timeout=600)[0].decode()
    assert driver.returncode == 0, out[-3000:]
    for w in workers:
        w_out = w.communicate(timeout=300)[0].decode()
        assert w.returncode == 0, w_out[-3000:]
    final = candidates(workdir)
    assert {c.worker.split("@")[0] for c in final} == {"worker"}
    assert len(final) == 5 and all(c.status in ("done", "failed") for c in final), out
    assert len({c.fingerprint for c in final}) == 5
    for cid, worker in held.items():
        if worker.startswith("worker@"):  # the driver's restart did not take these away
            cand = Study.load(workdir).get(cid)
            assert (cand.attempts, cand.worker) == (1, worker)
    assert all(c.attempts <= 2 for c in final)


def test_ctrl_c_is_one_line_exit_130_and_resumable(tmp_path, monkeypatch):
    """The seed is held in flight: its local worker process blocks inside its first
    training step (`nas.graph.stall`), so the Ctrl-C lands while it is claimed and
    unfinished however slow the machine is; the driver kills that worker."""
    monkeypatch.setenv("NAS_TEST_STALL_OP", "fc/logits")  # an op of the seed, CifarNet
    monkeypatch.setenv("NAS_TEST_STALL_S", "3600")
    workdir = str(tmp_path / "study")
    driver = start_driver(workdir, 2, 1, "--config.search.executor=local")
    wait_for(lambda: any(c.status == "running" for c in candidates(workdir)), driver)
    driver.send_signal(signal.SIGINT)
    out = driver.communicate(timeout=120)[0].decode()
    assert driver.returncode == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if "error" in ln.lower()]
    assert errors == [f"nas-search: error: interrupted; the study in {workdir} is resumable "
                      f"(run the same command again)"], out[-3000:]
    (seed,) = candidates(workdir)
    assert (seed.status, seed.attempts) == ("pending", 0)  # handed back, claimable at once


IDLE_POOL = """
import os, time
from nas.search.execution.executors import LocalExecutor
if __name__ == "__main__":
    executor = LocalExecutor(1)
    print(executor._pool.submit(os.getpid).result(), flush=True)
    time.sleep(300)
"""


def test_idle_pool_worker_exits_when_its_driver_is_killed(tmp_path):
    from nas.search.store.study import is_zombie

    (tmp_path / "idle_pool.py").write_text(IDLE_POOL)
    driver = subprocess.Popen([sys.executable, str(tmp_path / "idle_pool.py")],
                              stdout=subprocess.PIPE, text=True, env=_env())
    worker = int(driver.stdout.readline())
    try:
        driver.kill()  # SIGKILL: the pool is never shut down
        driver.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not os.path.exists(f"/proc/{worker}") or is_zombie(worker):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"pool worker {worker} outlived its driver")
    finally:
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass
