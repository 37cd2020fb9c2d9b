"""`nas-train --workdir` on a run whose checkpoint array files were deleted: one error line
naming the checkpoint, and nothing after it (orbax's background threads are shut down on
the error path, so no "Event loop is closed" from them). The files are deleted for real."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = [f"--config={os.path.join(ROOT, 'configs', 'digits_cnn.py')}",
        "--config.total_epochs=0.5", "--config.log_training_steps=1000",
        "--config.schedule.warmup_steps=2"]


def nas_train(workdir: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "nas.train.cli", f"--workdir={workdir}",
                           *ARGS], capture_output=True, text=True, timeout=600, env=env)


def after_settings(text: str) -> list[str]:
    """The lines after the settings block that is printed before training starts."""
    return [ln for ln in text.splitlines()
            if not ln.startswith("training settings (") and not ln.startswith("  ")]


@pytest.mark.slow  # trains a run, then three resumes in subprocesses: about a minute
def test_deleted_checkpoint_arrays_are_one_line_and_nothing_after_it(tmp_path):
    workdir = str(tmp_path / "run")
    first = nas_train(workdir)
    assert first.returncode == 0, first.stderr[-3000:]
    arrays = glob.glob(os.path.join(workdir, "checkpoints", "*", "state", "**", "d", "*"),
                       recursive=True)
    assert arrays
    for path in arrays:
        os.remove(path)
    for _ in range(3):  # the stray thread's line came "often", not always
        run = nas_train(workdir)
        assert run.returncode == 1
        assert run.stderr.count("\n") == 1, run.stderr
        (line,) = after_settings(run.stdout + run.stderr)
        assert line == run.stderr.strip()
        assert line.startswith("nas-train: error: checkpoint: step ") and \
            os.path.join(workdir, "checkpoints") in line, line
        assert "is corrupt or does not match this model" in line and \
            not line.endswith("["), line


class _CallsAClosedLoop:
    """Like tensorstore's late read: hands a result to an event loop that is closed."""

    def __init__(self, loop):
        self.loop = loop

    def __del__(self):
        self.loop.call_soon_threadsafe(print, "never")


class _RaisesOther:
    def __del__(self):
        raise RuntimeError("something else")


def test_only_the_closed_loop_hand_off_is_silenced():
    import asyncio
    import gc

    from nas.train.checkpoint import drop_closed_loop_callbacks

    seen = []
    before = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(str(u.exc_value))
    try:
        drop_closed_loop_callbacks()
        loop = asyncio.new_event_loop()
        loop.close()
        _CallsAClosedLoop(loop)  # dropped at once: its __del__ raises "Event loop is closed"
        _RaisesOther()
        gc.collect()
    finally:
        sys.unraisablehook = before
    assert seen == ["something else"]
