"""A search on a Ray cluster whose nodes share no disk with the driver.

The slow tests start a head with no task slots and two worker nodes on this machine, each
node in its own mount namespace where the workdir, the `npz:` data and ~/.cache/nas are an
empty tmpfs (`ray_nodes.LocalCluster`). The fast ones check how an address or a request that
cannot work is refused (a stale session file: tests/search/test_resume_and_ray.py).
"""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from nas.search.store.study import Study

sys.path.insert(0, os.path.dirname(__file__))
from ray_nodes import LocalCluster, unshare_refusal  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "digits_cnn_search.py")
SMALL = ["--config.train.total_epochs=0.5", "--config.train.ckpt_steps=0",
         "--config.train.log_training_steps=1000", "--config.train.schedule.warmup_steps=2",
         "--config.search.seed_epochs=0.5",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0", "--config.search.max_candidates=6",
         "--config.search.selection.min_acc=0.0", "--config.search.fidelity.rungs=()",
         "--config.search.fit.steps=3", "--config.search.fit.batches=1",
         "--config.search.fit.batch_size=8", "--config.search.fit.bn_batch_size=16",
         "--config.search.pipeline_depth=2", "--config.search.workers=2",
         "--config.search.prepare_ahead=0"]


def digits_npz(path):
    """The bundled digits as a user's Keras-style npz (8x8 greyscale, labels 0-9)."""
    from sklearn.datasets import load_digits

    from nas.train import digits

    raw = load_digits()
    images = np.round(raw.images * (255 / 16)).astype(np.uint8)
    arrays = {}
    for split, idx in digits.split_indices().items():
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images[idx], raw.target[idx].astype(
            np.uint8)
    np.savez(path, **arrays)
    return path


def search_command(workdir, data, *extra):
    return [sys.executable, "-m", "nas.search.cli", f"--config={CONFIG}",
            f"--workdir={workdir}", "--noprogress", f"--config.train.input.data.name=npz:{data}",
            *SMALL, *extra]


def start(command):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)


def counts(workdir):
    try:
        return Study.load(workdir).counts()
    except ValueError:
        return {}


def wait_for(condition, process, timeout=900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(process.stdout.read().decode()[-3000:])
        time.sleep(0.2)
    process.kill()
    raise AssertionError("timed out waiting for the driver: "
                         + process.communicate()[0].decode()[-3000:])


@pytest.fixture
def cluster_paths(tmp_path):
    """(workdir, data file, hidden folders) of a cluster search; the data lives in a folder
    the worker nodes cannot see, as does the workdir and this user's ~/.cache/nas."""
    reason = unshare_refusal()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("ray")
    (tmp_path / "data").mkdir()
    data = digits_npz(str(tmp_path / "data" / "digits.npz"))
    cache = os.path.join(os.path.expanduser("~"), ".cache", "nas")
    os.makedirs(cache, exist_ok=True)
    workdir = str(tmp_path / "study")
    os.makedirs(workdir)
    return workdir, data, [workdir, str(tmp_path / "data"), cache]


def assert_complete(workdir, output):
    study = Study.load(workdir)
    final = study.candidates()
    assert len(final) == 6 and all(c.status == "done" for c in final), (
        [(c.id, c.status, c.error) for c in final], output[-3000:])
    assert not any("No such file" in (c.error or "") for c in final)
    assert all(c.metrics.get("ray_train_s", 0) > 0 for c in final)  # each ran as a Ray task
    return study


def local_fingerprints(tmp_path, data):
    """The same search with the local executor: the candidates a cluster must find."""
    workdir = str(tmp_path / "local")
    out = subprocess.run(search_command(workdir, data, "--config.search.executor=local"),
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [c.fingerprint for c in Study.load(workdir).candidates()]


@pytest.mark.slow  # a 3-node cluster and two 6-candidate searches: about 10 minutes on 2 cores
def test_a_lost_worker_node_loses_nothing(tmp_path, cluster_paths):
    """A worker node SIGKILLed (every process of it) while it trains, once 2 candidates are
    done: its candidate trains again on the other node, counted as a retry and not
    blamed; all 6 are done with the local executor's candidates."""
    workdir, data, hidden = cluster_paths
    with LocalCluster(hidden) as cluster:
        driver = start(search_command(workdir, data, "--config.search.executor=ray",
                                      f"--config.search.ray_address={cluster.address}"))
        try:
            wait_for(lambda: counts(workdir).get("done", 0) >= 2 and cluster.busy_nodes(),
                     driver)
            assert cluster.kill_node(cluster.busy_nodes()[0]) > 0
            output = driver.communicate(timeout=1200)[0].decode()
        finally:
            driver.kill()
    assert driver.returncode == 0, output[-3000:]
    study = assert_complete(workdir, output)
    assert sum(c.metrics.get("ray_retries", 0) for c in study.candidates()) >= 1, output[-8000:]
    assert [c.fingerprint for c in study.candidates()] == local_fingerprints(tmp_path, data)


@pytest.mark.slow
def test_a_driver_killed_mid_search_resumes_on_the_same_cluster(cluster_paths):
    """The driver SIGKILLed while candidates train, then started again with the same
    command against the same cluster: every candidate done, what was finished kept as it
    was (trained to completion once), the interrupted ones trained once more."""
    workdir, data, hidden = cluster_paths
    command = search_command(workdir, data, "--config.search.executor=ray")
    with LocalCluster(hidden) as cluster:
        command.append(f"--config.search.ray_address={cluster.address}")
        driver = start(command)
        try:
            wait_for(lambda: counts(workdir).get("done", 0) >= 2
                     and counts(workdir).get("running", 0) >= 1, driver)
            driver.send_signal(signal.SIGKILL)
            driver.wait()
        finally:
            driver.kill()
        killed = Study.load(workdir)
        before = {c.id: c for c in killed.candidates("done")}
        interrupted = [c.id for c in killed.candidates("running")]
        driver = start(command)
        try:
            output = driver.communicate(timeout=1200)[0].decode()
        finally:
            driver.kill()
    assert driver.returncode == 0, output[-3000:]
    study = assert_complete(workdir, output)
    for cid, old in before.items():
        new = study.get(cid)
        assert (new.accuracy, new.finished_at, new.attempts) == (
            old.accuracy, old.finished_at, old.attempts)
    assert interrupted and all(study.get(cid).attempts == 2 for cid in interrupted)


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_address_is_one_line_from_the_cli(tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    out = subprocess.run(
        [sys.executable, "-m", "nas.search.cli", f"--config={CONFIG}",
         f"--workdir={tmp_path / 'study'}", "--noprogress", "--config.search.executor=ray",
         f"--config.search.ray_address={address}"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode != 0
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot reach a Ray cluster at" in lines[0], lines[-20:]
    assert not (tmp_path / "study").exists()  # refused before anything is written


@pytest.mark.slow
def test_a_task_no_node_can_hold_is_refused_at_start(monkeypatch):
    """A local Ray has this host's CPUs and no GPU: a task asking for 2 GPUs would stay
    pending forever, so the executor refuses it at once, in one line."""
    ray = pytest.importorskip("ray")
    from nas.search.execution.executors import RayExecutor
    from nas.search.strategy.settings import RayConfig

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    try:
        with pytest.raises(ValueError, match=r"^config field 'search.ray': each task asks for "
                                             r"CPU 1, GPU 64, TPU 1, more than any node") as e:
            RayExecutor(None, 1, settings=RayConfig(num_cpus=1, num_gpus=64,
                                                    resources={"TPU": 1.0}))
    finally:
        ray.shutdown()
    assert "\n" not in str(e.value)
