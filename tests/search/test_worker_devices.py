"""Device placement of local search workers (pure functions: no GPU needed to test)."""

import os
import subprocess
import sys
import threading
import time

import jax
import pytest

from nas.search.execution.driver import Driver
from nas.search.execution.executors import LocalExecutor, visible_gpus, worker_env
from nas.search.execution.worker import DeviceTurn, device_key, lock_path


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


def waiting_on(path: str) -> bool:
    """Whether some open file description waits for the flock on `path` (/proc/locks
    lists a blocked request as "->")."""
    inode = f":{os.stat(path).st_ino} "
    with open("/proc/locks") as locks:
        return any("->" in line and inode in line for line in locks)


HELD_S = 0.5  # how long the holder keeps its turn once the other one waits for it


def test_a_device_turn_waits_for_the_holder_and_counts_the_wait(tmp_path):
    path = str(tmp_path / "locks" / "cpu.lock")
    holder, turn = DeviceTurn(path), DeviceTurn(path)
    holder.__enter__()

    def release_once_waited_for():
        try:
            deadline = time.monotonic() + 120
            while not waiting_on(path) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(HELD_S)  # the wait the turn must count (begun before the poll saw it)
        finally:
            holder.__exit__()

    threading.Thread(target=release_once_waited_for, daemon=True).start()
    with turn:  # another open of the same file: excluded as another process would be
        assert holder._fd is None  # the holder let go before this turn began
    assert turn.waited >= HELD_S
    with pytest.raises(RuntimeError), turn:  # released after an error too
        raise RuntimeError("a step failed")
    with holder:
        assert holder.waited < HELD_S  # its own turns were never contended


HOLD = """
import sys, time
from nas.search.execution.worker import DeviceTurn
DeviceTurn(sys.argv[1]).__enter__()
print("held", flush=True)
time.sleep(300)
"""


def test_a_killed_holder_leaves_its_device_free(tmp_path):
    path = str(tmp_path / "cpu.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, path], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        turn = DeviceTurn(path)
        waiting = threading.Thread(target=turn.__enter__, daemon=True)
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive()  # the holder has it
        holder.kill()
        waiting.join(120)  # a deadline: it returns as soon as the turn is taken
        assert not waiting.is_alive()  # the kernel released the dead holder's lock
        turn.__exit__()
    finally:
        holder.kill()
        holder.wait()


def test_a_search_and_its_device_name_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_DEVICE_LOCKS", str(tmp_path / "locks"))
    (tmp_path / "a").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link")
    a = lock_path(str(tmp_path / "a"))
    assert a.startswith(str(tmp_path / "locks")) and a.endswith(".lock")
    assert lock_path(str(tmp_path / "link")) == a  # the same search, however it is named
    assert lock_path(str(tmp_path / "b")) != a
    monkeypatch.setenv("NAS_DEVICE_SLOT", "1")  # a local executor's second CPU worker slot
    if jax.default_backend() == "cpu":
        assert device_key() == "cpu-1" and lock_path(str(tmp_path / "a")) != a
    else:  # a GPU is named by the ids it has on the host
        assert lock_path(str(tmp_path / "a")) == a


def test_preparing_ahead_needs_the_search_that_shares_the_device():
    with pytest.raises(ValueError, match="share_device"):
        LocalExecutor(1, prepare_ahead=1)
