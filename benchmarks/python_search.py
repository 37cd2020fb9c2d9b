"""`nas.run_search` against `nas-search` on the README search: the Python door's overhead.

Runs the same search (configs/digits_cnn_search.py, the zoo CifarNet on the bundled digits)
through both doors, each in a fresh process with a fresh workdir, in turns (command,
Python, command, Python, ...) so that the shared machine's load drifts alike over both.
Prints each run's wall time and the ratio of the medians (Python / command), checks that
both doors proposed the same candidates, and times what only the Python door does (its
argument checks, `nas.search.api.prepare`) on its own.

    python benchmarks/python_search.py [--repeats 2] [--max-candidates 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "digits_cnn_search.py")
PYTHON = """
import sys
import nas
nas.run_search("cnn", "digits", workdir=sys.argv[1], max_candidates=int(sys.argv[2]),
               config=sys.argv[3], progress=False)
"""
PREPARE = """
import sys, time
from nas.search.api import prepare
start = time.monotonic()
prepare("cnn", "digits", workdir=sys.argv[1], max_candidates=int(sys.argv[2]),
        config=sys.argv[3], overrides=None, loss=None, optimizer=None, augment=None,
        costs=None, callbacks=())
print(time.monotonic() - start)
"""


def run(door: str, workdir: str, max_candidates: int) -> float:
    if door == "command":
        argv = [sys.executable, "-m", "nas.search.cli", f"--config={CONFIG}",
                f"--workdir={workdir}", f"--config.search.max_candidates={max_candidates}",
                "--noprogress"]
    else:
        argv = [sys.executable, "-c", PYTHON, workdir, str(max_candidates), CONFIG]
    start = time.monotonic()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def fingerprints(workdir: str) -> list[str | None]:
    from nas.search.store.study import Study

    return [c.fingerprint for c in Study.load(workdir).candidates()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-candidates", type=int, default=8)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"command": [], "python": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for door in ("command", "python") if i % 2 == 0 else ("python", "command"):
                workdir = os.path.join(tmp, f"{door}{i}")
                seconds = run(door, workdir, args.max_candidates)
                times[door].append(seconds)
                print(f"run {i + 1} {door:8s} {seconds:7.1f} s  load {os.getloadavg()[0]:.1f}",
                      flush=True)
        same = fingerprints(os.path.join(tmp, "command0")) == \
            fingerprints(os.path.join(tmp, "python0"))
        checks = float(subprocess.run(
            [sys.executable, "-c", PREPARE, os.path.join(tmp, "unused"),
             str(args.max_candidates), CONFIG], check=True, cwd=ROOT, capture_output=True,
            text=True).stdout.split()[-1])
    command, python = (statistics.median(times[d]) for d in ("command", "python"))
    print(f"\nmedian: nas-search {command:.1f} s, nas.run_search {python:.1f} s; "
          f"Python / command {python / command:.3f}; same candidates: {same}")
    print(f"the Python door's own work (argument checks, config): {checks:.2f} s, "
          f"{checks / command:.2%} of the search")


if __name__ == "__main__":
    main()
