"""Runs one CLI (`nas-search` by default, or the program named by the one argument:
`nas-train`) on many argument lists, each in a forked child (absl flags are global state),
and prints [[exit code, stderr, stdout], ...] as JSON. Input: a JSON list of argv lists,
or of {"argv": [...], "cwd": DIR, "env": {NAME: VALUE}} to run a case in its own
directory with variables of its own.

Imports happen once, before forking, so each case costs milliseconds. The two CLIs define
flags of the same names, so one process imports only one of them; nothing here starts a
JAX backend, so each child starts its own as the real program does.
"""

import json
import os
import signal
import sys
import tempfile

PROG = sys.argv[1] if len(sys.argv) > 1 else "nas-search"
if PROG == "nas-train":  # what reading a config and a graph file imports
    import nas.io.candidate  # noqa: F401
    import nas.train.config  # noqa: F401
    import nas.train.preflight  # noqa: F401
    import nas.train.recipes  # noqa: F401
    from nas.train import cli
else:
    import sklearn.datasets  # noqa: F401 - a config's checks read the digits' labels

    import nas.mutation.config  # noqa: F401 - imported before forking
    import nas.search.api  # noqa: F401
    import nas.search.strategy.settings  # noqa: F401
    import nas.train.config  # noqa: F401
    import nas.train.data  # noqa: F401
    import nas.train.recipes  # noqa: F401
    from nas.search import cli


def run(argv, cwd=None, env=None):
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:
            os.dup2(err.fileno(), 2)
            os.dup2(out.fileno(), 1)
            if cwd:
                os.chdir(cwd)
            os.environ.update(env or {})
            sys.argv = [PROG, *argv]
            signal.alarm(60)  # a case that waits (e.g. for a study) fails as SIGALRM, fast
            code = 0
            try:
                cli.main()
            except SystemExit as e:  # as Python's exit reads it
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
                code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 - reported as a traceback below
                import traceback

                traceback.print_exc()
                code = 3
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        out.seek(0)
        return [os.waitstatus_to_exitcode(status), err.read().decode(errors="replace"),
                out.read().decode(errors="replace")]


if __name__ == "__main__":
    cases = json.load(sys.stdin)
    print(json.dumps([run(c["argv"], c.get("cwd"), c.get("env")) if isinstance(c, dict)
                      else run(c) for c in cases]))
