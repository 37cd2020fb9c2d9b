"""Why a worker process died, told to the driver that lost it.

Why: a spawned worker first imports the user's script (`__main__`) again. A script that
calls `nas.run_search` outside `if __name__ == "__main__":` runs the search once more
there, and the worker dies before it takes a candidate; the driver only sees a broken pool.
Saying "killed or out of memory" then sends the user the wrong way.

- `refuse_spawned_import()`: called first by `run_search`; inside a worker's import of
  `__main__` it records one line naming the fix for the driver, and raises it.
- `death_cause(processes)`: the driver's line for a dead worker: the recorded line, or
  the exit status (an exception's traceback went to stderr; a signal means killed, e.g.
  out of memory).

A recorded line is a small text file in the temp folder named by the driver's and the
worker's process ids, read once and removed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable
from typing import Any

GUARD = 'if __name__ == "__main__":'
KILLED = "worker process died (killed or out of memory)"


def cause_path(parent_pid: int, pid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"nas-worker-death-{parent_pid}-{pid}.txt")


def in_spawned_import() -> bool:
    """Whether this process is a spawned worker importing the user's `__main__` again:
    multiprocessing runs the script as a module `__mp_main__` of its own while it imports
    it (elsewhere `__mp_main__`, when present, is an alias of `__main__`)."""
    mp_main = sys.modules.get("__mp_main__")
    return mp_main is not None and mp_main is not sys.modules.get("__main__")


def refuse_spawned_import(what: str = "run_search") -> None:
    """One RuntimeError (recorded for the driver) when called while a worker process
    imports the script again: the search belongs under the `__main__` guard."""
    if not in_spawned_import():
        return
    script = os.path.basename(getattr(sys.modules.get("__mp_main__"), "__file__", "")
                              or "your script")
    line = (f"a worker process, importing {script} again, called nas.{what}: put the "
            f"search under `{GUARD}` in {script}")
    record(line)
    raise RuntimeError(line)


def record(line: str) -> None:
    """Leaves `line` for the driver (this process's parent) to read."""
    try:
        with open(cause_path(os.getppid(), os.getpid()), "w") as f:
            f.write(line)
    except OSError:  # the line still reaches stderr with the exception
        pass


def death_cause(processes: Iterable[Any]) -> str:
    """The driver's line for the worker processes that ended (multiprocessing `Process`
    objects with `pid` and `exitcode`): a recorded cause first, else from the exit code."""
    codes = []
    for process in processes:  # a recorded line counts before the process is reaped
        path = cause_path(os.getpid(), process.pid)
        try:
            with open(path) as f:
                line = f.read().strip()
            os.remove(path)
        except OSError:
            line = ""
        if line:
            return line
        code = getattr(process, "exitcode", None)
        if code is not None:
            codes.append(code)
    if any(code > 0 for code in codes):  # the pool terminates the others: -SIGTERM
        return (f"worker process exited with status {max(codes)} on an exception (its "
                f"traceback is on stderr)")
    return KILLED
