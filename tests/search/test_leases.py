"""Leased claims: only expired (or dead-process) claims are re-queued; late results are
ignored, never a crash."""

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from nas.search.execution.driver import Driver
from nas.search.store.study import Study, default_worker

GRAPH = json.dumps({"g": 0})


def test_live_lease_is_not_requeued_and_expired_one_is(tmp_path):
    study = Study.create(tmp_path, {"max_attempts": 3})
    a, b = study.add(GRAPH), study.add(GRAPH)
    assert study.claim("remote-a", lease_s=30).id == a
    assert study.claim("remote-b", lease_s=0.2).id == b
    assert study.requeue_expired() == ([], [])  # both alive
    time.sleep(0.3)
    assert study.requeue_expired() == ([b], [])
    assert study.get(a).status == "running"
    # the late worker's renewal and result are refused without an exception
    assert not study.renew(b, "remote-b")
    assert study.tell(b, {"accuracy": 0.5}, worker="remote-b").status == "pending"
    again = study.claim("remote-c")
    assert (again.id, again.attempts) == (b, 2)
    assert study.renew(b, "remote-c")
    assert study.tell(b, {"accuracy": 0.7}, worker="remote-c").status == "done"
    assert study.tell(b, {"accuracy": 0.1}).accuracy == 0.7  # already done: no-op
    assert study.fail(b, "late").status == "done"


def test_claim_requeues_expired_claims_itself(tmp_path):
    study = Study.create(tmp_path, {"search": {"lease_s": 0.1, "max_attempts": 1}})
    a = study.add(GRAPH)
    study.claim("w1")
    time.sleep(0.2)
    assert study.claim("w2") is None  # a's only attempt is spent: failed, not re-queued
    cand = study.get(a)
    assert cand.status == "failed" and "lease expired" in cand.error


def test_claim_of_a_dead_local_process_is_void_at_once(tmp_path):
    study = Study.create(tmp_path)
    a = study.add(GRAPH)
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = default_worker().rsplit(":", 1)[0] + ":" + proc.stdout.strip()
    study.claim(dead, lease_s=3600)
    assert study.claim("driver@" + default_worker()).id == a  # no hour-long wait
    assert study.release(a, "driver@" + default_worker())
    cand = study.get(a)
    assert (cand.status, cand.attempts) == ("pending", 1)


def test_old_study_without_lease_column_is_migrated(tmp_path):
    import sqlite3

    study = Study.create(tmp_path)
    a = study.add(GRAPH)
    study.close()
    conn = sqlite3.connect(tmp_path / "study.db")
    conn.execute("ALTER TABLE candidates DROP COLUMN lease_until")
    conn.commit()
    conn.close()
    study = Study.load(tmp_path)
    assert study.claim("w").id == a
    assert study.renew(a, "w")


def test_a_claim_reads_the_studys_lease_and_attempts_as_the_settings_declare_them(tmp_path):
    study = Study.create(tmp_path, {"search": {"lease_s": 0.01}})
    study.add(GRAPH)
    with pytest.raises(ValueError) as e:
        study.claim("w")
    assert str(e.value) == ("config field 'search.lease_s' must be a number >= 0.05 and "
                            "<= 86400, got 0.01")
    with pytest.raises(ValueError, match="^lease_s: must be a number of seconds > 0, got 0$"):
        study.claim("w", lease_s=0)  # a caller's own argument
    study = Study.create(tmp_path / "top", {"max_attempts": 0})  # a study's own config
    with pytest.raises(ValueError, match="^max_attempts: must be an integer >= 1, got 0$"):
        study.requeue_expired()


LEASE_WORKDIR = "NAS_TEST_LEASE_WORKDIR"


def lease_given(candidate) -> float:
    """A user cost: the length of the lease the candidate in training was claimed with,
    read in the process that trains it (the driver's, with the inline executor)."""
    path = os.path.join(os.environ[LEASE_WORKDIR], "study.db")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        until, started = conn.execute("SELECT lease_until, started_at FROM candidates "
                                      "WHERE status='running'").fetchone()
    return until - started


def test_a_resumed_driver_claims_with_its_own_lease_not_the_stored_one(
        tmp_path, search_config, monkeypatch):
    """The keeper renews a quarter of the way through the lease it is given; a first claim
    for the lease the study was created with would expire long before that renewal."""
    monkeypatch.setenv(LEASE_WORKDIR, str(tmp_path))
    costs = {"lease_given": "tests.search.test_leases:lease_given"}
    for max_candidates, lease_s in ((1, 30.0), (2, 3600.0)):
        config = search_config(max_candidates=max_candidates, lease_s=lease_s, costs=costs)
        config.train.total_epochs = 0.1
        study = Driver(config, str(tmp_path)).run(progress=False)
    seed, child = study.candidates()
    # read after training: a renewal on the way (a slow machine's) ends the lease later
    assert 29.0 <= seed.extra_metrics["lease_given"] < 600.0
    assert child.extra_metrics["lease_given"] >= 3599.0
