"""Device placement of local search workers (pure functions: no GPU needed to test)."""

import multiprocessing
import threading

import pytest

from nas.search.driver import Driver
from nas.search.executors import visible_gpus, worker_env
from nas.search.worker import DeviceTurn


def test_workers_get_their_own_gpus_when_there_are_enough():
    gpus = ["0", "1", "2", "3"]
    envs = [worker_env(i, 2, gpus) for i in range(2)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3"]
    assert all(e["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" for e in envs)
    assert all("XLA_PYTHON_CLIENT_MEM_FRACTION" not in e for e in envs)


def test_more_workers_than_gpus_share_with_a_memory_fraction():
    envs = [worker_env(i, 3, ["0"]) for i in range(3)]
    assert {e["CUDA_VISIBLE_DEVICES"] for e in envs} == {"0"}
    assert all(float(e["XLA_PYTHON_CLIENT_MEM_FRACTION"]) * 3 <= 0.9 + 1e-9 for e in envs)
    two = [worker_env(i, 4, ["0", "1"])["CUDA_VISIBLE_DEVICES"] for i in range(4)]
    assert sorted(two) == ["0", "0", "1", "1"]


def test_cpu_host_only_disables_preallocation():
    assert worker_env(0, 2, []) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert visible_gpus() == ["3", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


@pytest.mark.parametrize("workers, depth, asked, processes", [
    (1, 1, 1, 0),  # every child reads the result in training: nothing to prepare ahead
    (1, 2, 1, 1),
    (1, 3, 2, 2),
    (1, 3, 5, 2),  # no more than the children that can be proposed ahead
    (2, 2, 1, 0),
    (2, 3, 1, 1),
    (2, 4, 0, 0),  # turned off
])
def test_processes_prepare_ahead_only_what_the_pipeline_allows(search_config, tmp_path,
                                                               workers, depth, asked,
                                                               processes):
    config = search_config(workers=workers, pipeline_depth=depth, prepare_ahead=asked)
    assert Driver(config, str(tmp_path / "s")).prepare_ahead == processes


def test_a_device_turn_waits_for_the_process_lock_and_counts_the_wait():
    lock = multiprocessing.get_context("spawn").Lock()
    turn = DeviceTurn(lock)
    lock.acquire()
    threading.Timer(0.2, lock.release).start()
    with turn:
        assert not lock.acquire(block=False)  # held for the candidate's steps
    assert turn.waited >= 0.15
    assert lock.acquire(block=False)  # released afterwards, also after an error
    lock.release()
    with pytest.raises(RuntimeError), turn:
        raise RuntimeError("a step failed")
    assert lock.acquire(block=False)
