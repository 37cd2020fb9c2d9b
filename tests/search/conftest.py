import contextlib
import fcntl
import json
import os
import runpy
import shutil
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEARCH_CONFIG = os.path.join(ROOT, "configs", "digits_cnn_search.py")
# The search tests' digits: 16x16, a quarter of the README's FLOPs per candidate (the
# suite's time is mostly compiling and training them).
TINY_IMAGE_SIZE = 16


def tiny_search_config(**search):
    """The README's search, shrunk so a candidate trains in seconds."""
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.train.input.image_size = TINY_IMAGE_SIZE
    config.train.total_epochs = 0.5
    config.train.ckpt_steps = 0
    config.train.schedule = {"decay_type": "cosine", "warmup_steps": 2}
    config.train.log_training_steps = 1000
    config.search.max_candidates = 3
    config.search.seed_epochs = 0.5
    config.search.seed_max_epochs = 0.0  # one round (tests of rounds pass seed_max_epochs)
    config.search.min_child_steps = 0  # epochs decide (tests of it pass min_child_steps)
    config.search.fit = {"steps": 3, "batches": 1, "batch_size": 8,  # the real path, briefly
                         "bn_batch_size": 16}
    config.search.executor = "inline"
    config.search.selection = {"costs": ("flops", "params"), "min_acc": 0.0}
    config.search.mutation.time_limit_s = 600.0  # never binding: proposals stay deterministic
    config.search.fidelity = {}  # one budget per child (tests of rungs pass `fidelity`)
    config.search.pipeline_depth = 1  # each proposal reads every result (tests of the
    # pipeline pass `pipeline_depth`)
    config.search.finals = {"k": 0}  # tests of the finals pass `finals`
    config.search.update(search)
    return config


def probe_cli(cases: list, prog: str = "nas-search") -> list[SimpleNamespace]:
    """What `prog` (`nas-search` or `nas-train`) gives on each case, as
    SimpleNamespace(returncode, stderr, stdout), run by `_cli_probe.py` in forks of one
    process that imported it once (a case: an argv list, or {"argv", "cwd", "env"})."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "search", "_cli_probe.py"),
                           prog],
                          input=json.dumps(cases), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [ROOT, os.environ.get("PYTHONPATH")]))},
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [SimpleNamespace(returncode=code, stderr=stderr, stdout=stdout)
            for code, stderr, stdout in json.loads(proc.stdout)]


def run_cli_probe(cases: list) -> list[tuple[int, str]]:
    """(exit code, stderr) of `nas-search` on each case (`probe_cli`)."""
    return [(p.returncode, p.stderr) for p in probe_cli(cases)]


def headless_browser() -> str | None:
    """Debian's chromium (or another Chromium) on PATH; None: the browser tests skip."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                  "google-chrome"))), None)


def dump_dom(browser: str, path) -> str:
    """The DOM of the page at `path` after its scripts ran, from a headless browser."""
    out = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
         "--dump-dom", f"file://{path}"],
        capture_output=True, text=True, timeout=300, check=True)
    return out.stdout


@contextlib.contextmanager
def held_data_dir(data_dir: str) -> Iterator[str]:
    """A fresh data dir whose `digits` build lock this process holds: a candidate that
    trains on it stays in flight (its worker waits for the lock, as for another
    process's build) until the block ends, whatever the load. The test decides when."""
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, ".digits.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield data_dir


@pytest.fixture
def search_config():
    return tiny_search_config
