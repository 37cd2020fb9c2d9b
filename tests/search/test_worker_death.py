"""A worker process that dies names its cause (`nas.search.execution.executors`)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from nas.search.execution import executors
from nas.search.store.study import Study

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_a_script_without_the_main_guard_fails_naming_the_guard(tmp_path):
    workdir = tmp_path / "study"
    env = dict(os.environ, PYTHONPATH=ROOT, NAS_DATA_DIR=str(tmp_path / "data"))
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "search",
                                                       "_unguarded_search.py"), str(workdir)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0
    (seed,) = Study.load(workdir).candidates()
    assert seed.status == "failed"
    assert seed.error == ("a worker process, importing _unguarded_search.py again, called "
                          "nas.run_search: put the search under `if __name__ == "
                          "\"__main__\":` in _unguarded_search.py"), seed.error
    assert "killed or out of memory" not in run.stderr


def test_a_worker_that_exited_on_an_exception_is_not_called_killed():
    ended = [types.SimpleNamespace(pid=0, exitcode=1), types.SimpleNamespace(pid=1,
                                                                              exitcode=-15)]
    assert "exited with status 1 on an exception" in executors.death_cause(ended)
    killed = [types.SimpleNamespace(pid=0, exitcode=-9)]
    assert executors.death_cause(killed) == executors.KILLED
