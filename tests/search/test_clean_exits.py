"""How `nas-search` ends when a person stops it or has nothing to do: Ctrl-C of a search
training in its worker pool is exit 130 and one line (no resource-tracker warning of leaked
semaphores), and resuming a finished search is one line with its counts and report."""

import json
import os
import runpy
import signal
import subprocess
import sys
import time

import pytest

from nas.search.store.study import Study
from nas.search.strategy.settings import validate_search
from tests.search.conftest import ROOT, SEARCH_CONFIG

INTERRUPTED = "nas-search: error: interrupted; the study in {} is resumable (run the same " \
              "command again)"


def _env():
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _training(workdir):
    """True once a candidate has logged a training step (its worker holds its bars)."""
    root = os.path.join(workdir, "candidates")
    for cid in os.listdir(root) if os.path.isdir(root) else ():
        path = os.path.join(root, cid, "train", "metrics.jsonl")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
    return False


@pytest.mark.slow  # a spawned worker imports jax and compiles before it trains: ~30 s
def test_ctrl_c_of_a_pool_search_is_one_line_and_exit_130(tmp_path):
    workdir = str(tmp_path / "study")
    # A terminal's Ctrl-C reaches the whole foreground process group: the driver, its
    # spawned pool worker and the resource tracker. A new session stands in for it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
         f"--workdir={workdir}", "--noprogress", "--config.train.total_epochs=2",
         "--config.train.ckpt_steps=0", "--config.search.seed_epochs=0",
    "--config.search.seed_max_epochs=0",
    "--config.search.min_child_steps=0",
         "--config.search.max_candidates=3", "--config.search.workers=1",
         "--config.search.executor=local", "--config.search.log_every_steps=1",
         "--config.search.fidelity.rungs=()", "--config.search.finals.k=0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not _training(workdir):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no candidate started training"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.splitlines() == [INTERRUPTED.format(workdir)], err
    assert "leaked" not in err + out and "Warning" not in err + out


def test_resuming_a_finished_search_says_so_in_one_line(tmp_path):
    workdir = tmp_path / "study"
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.search.finals = {"k": 0}  # a study without finals: finished when its candidates are
    validate_search(config)  # as the driver stores it
    study = Study.create(workdir, config=config.to_dict())
    done = study.add('{"candidate": 1}')
    study.claim("w", done)
    study.tell(done, {"accuracy": 0.9, "flops": 1e6, "params": 1e4})
    failed = study.add('{"candidate": 2}')
    study.claim("w", failed)
    study.fail(failed, "diverged")
    study.close()
    out = subprocess.run(
        [sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
         f"--workdir={workdir}", "--config.search.max_candidates=2",
         "--config.search.finals.k=0"],
        capture_output=True, text=True, timeout=300, env=_env())
    assert out.returncode == 0, out.stderr
    report = workdir / "report" / "report.html"
    assert out.stdout.splitlines() == [
        f"the search in {workdir} is finished (done 1, failed 1; max_candidates 2); "
        f"report: {report}"], out.stdout
    assert out.stderr == "" and report.exists()


def _finished_study(workdir, budget, done):
    """A study whose last run had `budget` candidates, `done` of them finished."""
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.search.max_candidates = budget
    config.search.finals = {"k": 0}  # a study without finals: finished when its candidates are
    validate_search(config)
    study = Study.create(workdir, config=config.to_dict())
    study.set_state("max_candidates", budget)
    for i in range(done):
        cid = study.add(json.dumps({"candidate": i + 1}))
        study.claim("w", cid)
        study.tell(cid, {"accuracy": 0.9, "flops": 1e6 + i, "params": 1e4})
    study.close()


def _search(workdir, *flags):
    return subprocess.run(
        [sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
         f"--workdir={workdir}", "--noprogress", "--config.search.finals.k=0", *flags],
        capture_output=True, text=True, timeout=300, env=_env())


@pytest.mark.parametrize("flags, budget", [((), 4), pytest.param(
    ("--config.search.max_candidates=3",), 3, marks=pytest.mark.slow)])
def test_a_finished_search_keeps_its_budget_unless_a_larger_one_is_given(tmp_path, flags,
                                                                         budget):
    # run with --config.search.max_candidates=4; the config file says 8: rerunning it
    # without the flag (or with a budget that is not larger) trains nothing
    workdir = tmp_path / "study"
    _finished_study(workdir, budget=4, done=4)
    out = _search(workdir, *flags)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"the search in {workdir} is finished (done 4; max_candidates {budget}); report: "
        f"{workdir / 'report' / 'report.html'}"], out.stdout
    with Study.load(workdir) as study:
        assert sum(study.counts().values()) == 4


@pytest.mark.slow  # trains a seed and a child through the CLI: ~1 min on 2 loaded cores
def test_a_larger_budget_extends_a_finished_search_and_says_so(tmp_path):
    from nas.search.execution.driver import Driver
    from tests.search.conftest import tiny_search_config

    workdir = tmp_path / "study"
    Driver(tiny_search_config(max_candidates=1), str(workdir)).run(progress=False)
    config = tmp_path / "tiny.py"  # the same search, whose file asks for 3 candidates
    config.write_text("from tests.search.conftest import tiny_search_config\n\n\n"
                      "def get_config(arg=None):\n    return tiny_search_config()\n")
    run = ([sys.executable, "-m", "nas.search.cli", f"--config={config}",
            f"--workdir={workdir}", "--noprogress"])
    again = subprocess.run(run, capture_output=True, text=True, timeout=300, env=_env())
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"the search in {workdir} is finished (done 1; "
                                   f"max_candidates 1)"), again.stdout
    more = subprocess.run([*run, "--config.search.max_candidates=2"], capture_output=True,
                          text=True, timeout=600, env=_env())
    assert more.returncode == 0, more.stderr[-3000:]
    assert more.stdout.splitlines()[0] == (f"extending the search in {workdir} from 1 to 2 "
                                           f"candidates"), more.stdout
    with Study.load(workdir) as study:
        assert sum(study.counts().values()) == 2 and study.counts()["done"] >= 1


SIGINT_IN_GC_CALLBACK = """
import gc, signal, time
from nas.search.cli import _count_interrupts
received = _count_interrupts()
def callback(phase, info):
    if phase == "start" and not received:
        signal.raise_signal(signal.SIGINT)
gc.callbacks.append(callback)
try:
    gc.collect()
    time.sleep(30)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
"""


def test_ctrl_c_inside_a_gc_callback_is_delivered_after_it_without_a_traceback():
    """jax runs a callback on every garbage collection; Ctrl-C landing there used to print
    "Exception ignored in: <function _xla_gc_callback>" with a traceback (and be lost)."""
    r = subprocess.run([sys.executable, "-c", SIGINT_IN_GC_CALLBACK], capture_output=True,
                       text=True, env=_env(), timeout=300)
    assert r.stdout.strip() == "interrupted", r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
