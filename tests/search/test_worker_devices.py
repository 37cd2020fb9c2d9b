"""Device placement of local search workers (pure functions: no GPU needed to test)."""

from nas.search.executors import visible_gpus, worker_env


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
