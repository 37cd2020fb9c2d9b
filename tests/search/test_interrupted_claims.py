"""Ctrl-C hands every claim of the driver back, wherever in the loop it lands.

The interrupt is injected at chosen points (the driver, study and executor are the real
ones): a test that sends SIGINT to a process hits these windows only by chance, which is
how a loaded machine once left the seed `running` after Ctrl-C."""

import pytest

from nas.search.execution.driver import Driver
from nas.search.store.study import Study


class InterruptedBuildingTask(Driver):
    """Ctrl-C while the task of a claimed candidate is being built."""

    def startable(self, candidate_id):
        raise KeyboardInterrupt


def assert_all_pending(workdir):
    with Study.load(workdir) as study:
        rows = [(c.status, c.attempts, c.worker) for c in study.candidates()]
    assert rows and all(r == ("pending", 0, None) for r in rows), rows


def test_ctrl_c_while_a_claimed_task_is_built_hands_the_claim_back(tmp_path, search_config):
    workdir = str(tmp_path / "study")
    with pytest.raises(KeyboardInterrupt):
        InterruptedBuildingTask(search_config(), workdir).run(progress=False)
    assert_all_pending(workdir)


def test_ctrl_c_after_a_claim_commits_and_before_it_returns_hands_it_back(tmp_path,
                                                                        search_config):
    workdir = str(tmp_path / "study")
    driver = Driver(search_config(), workdir)
    claimed = []
    real_claim = driver.study.claim

    def claim_then_interrupt(*args, **kwargs):
        claimed.append(real_claim(*args, **kwargs))  # committed: running, attempt counted
        raise KeyboardInterrupt

    driver.study.claim = claim_then_interrupt
    with pytest.raises(KeyboardInterrupt):
        driver.run(progress=False)
    assert claimed and claimed[0].status == "running"
    assert_all_pending(workdir)


def test_ctrl_c_leaves_another_workers_claim_alone(tmp_path, search_config):
    workdir = str(tmp_path / "study")
    driver = InterruptedBuildingTask(search_config(), workdir)
    driver.seed_population()
    with Study.load(workdir) as study:
        seed = study.claim("worker@elsewhere:1", lease_s=3600)
        study.add('{"a": 1}', parent_id=seed.id, generation=1)
    with pytest.raises(KeyboardInterrupt):
        driver.run(progress=False)
    with Study.load(workdir) as study:
        assert (study.get(seed.id).status, study.get(seed.id).worker) == (
            "running", "worker@elsewhere:1")
        assert (study.get(seed.id + 1).status, study.get(seed.id + 1).attempts) == (
            "pending", 0)


DEFERRED = """
import signal
from nas.search.execution.executors import deferred_interrupt
# Python's own handler, as in a terminal: a job started in the background by a shell (CI)
# inherits SIGINT ignored, and an ignored Ctrl-C is ignored after the step too
signal.signal(signal.SIGINT, signal.default_int_handler)
steps = []
try:
    with deferred_interrupt():
        signal.raise_signal(signal.SIGINT)  # Ctrl-C in the middle of the step
        steps.append("the step ran to its end")
    steps.append("not interrupted after it")
except KeyboardInterrupt:
    steps.append("interrupted after it")
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
print(" / ".join(steps))
"""


def test_a_ctrl_c_inside_a_deferred_step_is_raised_right_after_it():
    """In a process of its own: only a main thread may set signal handlers."""
    import subprocess
    import sys

    from tests.search.conftest import ROOT

    r = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.stdout.strip() == "the step ran to its end / interrupted after it", r.stderr
