"""A real training subprocess killed with SIGKILL resumes to the same final params."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
WORKER = os.path.join(HERE, "resume_worker.py")


def _run(args, **kw):
    return subprocess.run([sys.executable, WORKER, *args], capture_output=True, text=True,
                          timeout=300, **kw)


def _committed_steps(workdir):
    ckdir = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(ckdir):
        return []
    return [int(d) for d in os.listdir(ckdir)
            if d.isdigit() and os.path.exists(os.path.join(ckdir, d, "commit_success.txt"))]


@pytest.mark.slow  # three training processes: about 40 s on 2 shared cores
@pytest.mark.parametrize("feed", ["grain", "device"])
def test_sigkill_then_resume_matches_uninterrupted(data_dir, tmp_path, feed):
    ref = _run([data_dir, str(tmp_path / "ref"), str(tmp_path / "ref.npz"), feed])
    assert ref.returncode == 0, ref.stderr[-3000:]

    work = str(tmp_path / "killed")
    proc = subprocess.Popen([sys.executable, WORKER, data_dir, work, str(tmp_path / "x.npz"),
                             feed, "0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 200
        while time.time() < deadline and not any(s >= 4 for s in _committed_steps(work)):
            assert proc.poll() is None, "worker finished before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    killed_at = max(_committed_steps(work))
    assert 4 <= killed_at < 44  # 1437 // 32 = 44 steps in the whole run
    assert not (tmp_path / "x.npz").exists()

    resumed = _run([data_dir, work, str(tmp_path / "resumed.npz"), feed])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # This process drew only the batches of the steps after the checkpoint (the first one
    # is drawn to compile, then trained on).
    assert f"train_batches={44 - killed_at}" in resumed.stdout, resumed.stdout
    a, b = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7, err_msg=name)
