"""Study under real concurrent and killed processes."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from nas.search import Study

WORKER = Path(__file__).with_name("_study_worker.py")


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_concurrent_claims_never_duplicate(tmp_path):
    study = Study.create(tmp_path)
    ids = [study.add(json.dumps({"g": i})) for i in range(80)]
    procs = [_spawn("claim-all", str(tmp_path), f"w{i}") for i in range(4)]
    deadline = time.time() + 60
    while len(list(tmp_path.glob("ready-*"))) < 4:  # all at the start line
        assert time.time() < deadline, "workers did not start"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    claimed = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        claimed.append(json.loads(out))
    flat = [i for ids_ in claimed for i in ids_]
    assert sorted(flat) == ids, "every candidate claimed exactly once"
    assert sum(1 for c in claimed if c) >= 2, "several processes really competed"
    done = study.candidates("done")
    assert len(done) == 80
    assert all(c.attempts == 1 for c in done)
    by_worker = {c.worker for c in done}
    assert by_worker <= {f"w{i}" for i in range(4)}


def test_requeue_after_sigkill_and_attempts_cap(tmp_path):
    study = Study.create(tmp_path, {"max_attempts": 2})
    cid = study.add('{"g": 0}')
    other = study.add('{"g": 1}')
    for attempt in (1, 2):
        proc = _spawn("claim-hold", str(tmp_path), f"driver{attempt}")
        assert int(proc.stdout.readline()) == cid
        _kill(proc)
        cand = Study.load(tmp_path).get(cid)
        assert (cand.status, cand.attempts, cand.worker) == ("running", attempt, f"driver{attempt}")
        requeued, failed = Study.load(tmp_path).requeue_running()
        if attempt == 1:
            assert (requeued, failed) == ([cid], [])
            assert study.get(cid).status == "pending"
        else:
            assert (requeued, failed) == ([], [cid])
    cand = study.get(cid)
    assert cand.status == "failed"
    assert "max_attempts=2" in cand.error
    assert study.get(other).status == "pending"
    assert study.claim("w").id == other  # the capped one is never handed out again


def test_sigkill_during_writes_leaves_consistent_file(tmp_path):
    Study.create(tmp_path)
    proc = _spawn("add-loop", str(tmp_path))
    assert proc.stdout.readline().strip() == "ready"
    watcher = Study.load(tmp_path)
    deadline = time.monotonic() + 120  # killed in the middle of writing, however slow
    while watcher.last_id() < 5:
        assert time.monotonic() < deadline and proc.poll() is None, "no rows were written"
        time.sleep(0.01)
    watcher.close()
    _kill(proc)
    conn = sqlite3.connect(tmp_path / "study.db")
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    study = Study.load(tmp_path)
    n = len(study.candidates())
    assert n > 0
    # add(state=...) is one transaction: the counter matches the rows exactly.
    assert study.get_state("added") == n
    assert [json.loads(c.graph_json)["n"] for c in study.candidates()] == list(range(1, n + 1))
