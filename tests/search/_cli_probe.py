"""Runs `nas-search` on many argument lists, each in a forked child (absl flags are global
state), and prints [[exit code, stderr], ...] as JSON. Input: a JSON list of argv lists,
or of {"argv": [...], "cwd": DIR} to run a case in its own directory.

Imports happen once, before forking, so each case costs milliseconds.
"""

import json
import os
import signal
import sys
import tempfile

import sklearn.datasets  # noqa: F401 - a config's checks read the digits' labels

import nas.mutation.config  # noqa: F401 - imported before forking
import nas.search.api  # noqa: F401
import nas.search.strategy.settings  # noqa: F401
import nas.train.config  # noqa: F401
import nas.train.data  # noqa: F401
import nas.train.recipes  # noqa: F401
from nas.search import cli


def run(argv, cwd=None):
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(err.fileno(), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            if cwd:
                os.chdir(cwd)
            sys.argv = ["nas-search", *argv]
            signal.alarm(60)  # a case that waits (e.g. for a study) fails as SIGALRM, fast
            try:
                cli.main()
            except SystemExit as e:
                os._exit(e.code if isinstance(e.code, int) else 1)
            except BaseException:  # noqa: BLE001 - reported as a traceback below
                import traceback

                traceback.print_exc()
                os._exit(3)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        return [os.waitstatus_to_exitcode(status), err.read().decode(errors="replace")]


if __name__ == "__main__":
    cases = json.load(sys.stdin)
    print(json.dumps([run(c["argv"], c["cwd"]) if isinstance(c, dict) else run(c)
                      for c in cases]))
