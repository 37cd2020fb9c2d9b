"""nas-search: run (or resume) an evolution search, train its candidates, report, export.

usage:
  nas-search --config=configs/digits_cnn_search.py --workdir=DIR [--config.search.x=...]
      [--seed_graph=FILE.json ...]
      run the search in DIR (created, or resumed with the same command), from the zoo
      model of the config or from the graph (and weights) in FILE.json (given more
      than once: several seeds); --config.search.start_from=OTHER_DIR starts it from
      the validation front of the search in OTHER_DIR, weights included
  nas-search worker --workdir=DIR [--candidate=N] [--wait_s=600]
      train the study's candidates in this process, next to the driver (any number of
      workers, started before or after the driver), or train exactly candidate N
  nas-search report --workdir=DIR [--csv]
      print the best candidates (every candidate as CSV with --csv) and write DIR/report/
  nas-search export --workdir=DIR --id=N|recommended|best --out=FILE.zip
      write candidate N (or the summary's recommendation, or the most accurate on
      validation) as one file (graph, weights, training settings, metrics) that
      `nas.load_candidate` loads and `nas-train --graph=FILE.zip` trains on
  nas-search export --format=flax --workdir=DIR --id=N --out=DIRECTORY
      write candidate N as plain Flax code: DIRECTORY/model.py (a flax.linen module
      `Model`) and DIRECTORY/variables.msgpack (its trained variables), runnable without nas
  nas-search dashboard --workdir=DIR [--port=8080] [--host=127.0.0.1]
      serve the study read-only over HTTP while the search runs: the overview updates as
      candidates finish, /candidates/N shows any candidate, /report.csv downloads
  nas-search import --flax=package.module:factory --input_shape=32,32,3
      [--variables=FILE] --out=seed.zip
      import a Flax (linen or NNX) model, with its weights, as a file that --seed_graph
      starts a search from (`factory()` returns the module; --variables: a
      flax.serialization msgpack file or an orbax checkpoint directory, else a linen
      module is initialised from PRNGKey(0) and an NNX module keeps its own state);
      the imported graph must give the module's outputs on a random batch, else nothing
      is written

main flags:
  --config=FILE[:arg]   search config (train and search sections); --config.F=V overrides
  --workdir=DIR         the study directory
  --candidate=N         worker: train only candidate N
  --wait_s=S            worker: wait this long for a study to appear or for work (600)
  --id=N --out=FILE     export: which candidate (N, recommended or best), and where
  --format=zip|flax     export: one file (zip, the default) or a directory of Flax code
  --port=P --host=H     dashboard: where to listen (8080 on 127.0.0.1; 0 picks a port)
  --flax=M:F --input_shape=H,W,C [--variables=FILE] --out=FILE   import (no --workdir)
  --noprogress          no progress bar
  --helpfull            every flag, absl's included

Bad input prints one line (`nas-search: error: ...`) and exits 1; Ctrl-C prints one line,
leaves the study resumable and exits 130; resuming a finished search prints one line (its
counts and the report's path) and trains nothing. A resumed search keeps the budget it
last ran to (`search.max_candidates`) unless the command line names another; a larger one
prints "extending the search in DIR from N to M candidates" and trains the rest.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from absl import app, flags, logging
from ml_collections import config_flags

from nas.cli_messages import (
    check_workdir,
    first_line,
    flag_error_line,
    os_error_line,
    unknown_field_line,
)

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file("config", None, "Search config file.",
                                          lock_config=False)
_WORKDIR = flags.DEFINE_string("workdir", None, "The study directory (created or resumed).")
_ID = flags.DEFINE_string("id", None, "export: a candidate id, 'recommended' (the summary's "
                          "recommendation) or 'best' (highest validation accuracy).")
_OUT = flags.DEFINE_string("out", None, "Output file (export), or directory (--format=flax).")
_FORMAT = flags.DEFINE_string("format", "zip", "export: zip (one file that nas loads) or flax "
                              "(a new directory with model.py and variables.msgpack).")
_CANDIDATE = flags.DEFINE_integer("candidate", None, "worker: train only this candidate.",
                                  lower_bound=1)
_WAIT = flags.DEFINE_float("wait_s", 600.0, "worker: how long to wait for a study or work.",
                           lower_bound=0.0)
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")
_SEED_GRAPH = flags.DEFINE_multi_string(
    "seed_graph", None, "Start the population from this graph JSON or `nas-search export` "
    "file (with its weights when it has them); same as --config.search.seed_graph. Given "
    "again, each further one is a seed too (search.extra_seeds); the first is the seed the "
    "reports compare with.")
_PORT = flags.DEFINE_integer("port", 8080, "dashboard: the port to listen on (0: any free "
                             "one).", lower_bound=0, upper_bound=65535)
_HOST = flags.DEFINE_string("host", "127.0.0.1", "dashboard: the address to listen on.")
_FLAX = flags.DEFINE_string("flax", None, "import: package.module:factory returning the "
                            "Flax module.")
_INPUT_SHAPE = flags.DEFINE_string("input_shape", None, "import: one example's shape, "
                                   "e.g. 32,32,3.")
_VARIABLES = flags.DEFINE_string("variables", None, "import: the module's variables (a "
                                 "flax msgpack file or an orbax checkpoint directory).")
_CSV = flags.DEFINE_bool("csv", False, "report: print every candidate as CSV on stdout "
                         "(the HTML report and report.csv are written too).")

PROG = "nas-search"
COMMANDS = ("search", "worker", "report", "export", "dashboard", "import")
EXPORT_FORMATS = ("zip", "flax")
INTERRUPTED = 130


def fail(message: str, code: int = 1) -> None:
    """One line on stderr, then `_exit`."""
    message = re.sub(r"\s*\[tensorstore_spec=.*", "", message)  # orbax's internals
    if len(message) > 600:
        message = message[:597] + "..."
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    _exit(code)


def _exit(code: int) -> None:
    """Exit without running anything else (no atexit tracebacks from libraries' threads)."""
    from nas.search.store.database import close_all

    sys.stdout.flush()
    close_all()
    os._exit(code)


def _parse(argv: Sequence[str]) -> list[str]:
    if any(a in ("--help", "-h", "-?", "--help=true") for a in argv[1:]) or (
            len(argv) > 1 and argv[1] == "help"):
        print(__doc__.strip())
        sys.exit(0)
    from nas.search.inputs import add_open_overrides, split_open_overrides

    argv, bounds = split_open_overrides(argv)  # ml_collections reads sys.argv as well
    sys.argv = split_open_overrides(sys.argv)[0]
    try:
        rest = FLAGS(list(argv))
        if FLAGS["config"].present:
            FLAGS.config.keys()
            add_open_overrides(FLAGS.config, bounds)
        return rest
    except flags.Error as e:
        fail(flag_error_line(e))
    except (AttributeError, KeyError) as e:  # an override of a field the config lacks
        fail(unknown_field_line(e, argv))
    except Exception as e:  # noqa: BLE001 - a config file that fails to load
        fail(f"--config: {config_file_error(e, argv)}")
    return []


def config_file_error(e: BaseException, argv: Sequence[str]) -> str:
    """What went wrong loading a config file, with the file named."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    path = given[-1].split(":", 1)[0] if given else ""
    if path and not os.path.isfile(path):
        return f"{path}: No such file or directory"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[-1] if lines else type(e).__name__
    return text if not path or path in text else f"{path}: {text}"


def _search(workdir: str) -> None:
    from nas.search.api import run_study
    from nas.search.reporting.report_text import summary

    if _CONFIG.value is None:
        raise ValueError("--config is required to run a search")
    config = _CONFIG.value
    if _SEED_GRAPH.value:
        config.search.seed_graph, *more = _SEED_GRAPH.value
        if more:
            config.search.extra_seeds = tuple(more)
    given = "search.max_candidates" in config_flags.get_override_values(FLAGS["config"])
    study, report = run_study(config, workdir, budget_given=given, progress=_PROGRESS.value)
    if report is not None:
        print(summary(study))
        print(f"report: {report}")


def _worker(workdir: str) -> None:
    from nas.search.execution.study_worker import run_worker
    from nas.search.reporting.report_text import reported_test_text, val_accuracy_text
    from nas.search.store.candidate import Status

    check_workdir(workdir, create=False)
    try:
        trained = run_worker(workdir, _CANDIDATE.value, wait_s=_WAIT.value,
                             say=lambda line: print(f"{PROG} worker: {line}", flush=True))
    except ValueError as e:
        raise naming_flag(e, f"--candidate={_CANDIDATE.value}") from None
    for c in trained:
        if c.status == Status.DONE:
            print(f"candidate {c.id}: validation accuracy {val_accuracy_text(c)}, test "
                  f"accuracy {reported_test_text(c) or '-'} (reported only), FLOPs "
                  f"{c.flops:,.0f}, params {c.params:,.0f}")
        elif c.rungs and c.status in (Status.STOPPED, Status.PENDING, Status.RUNNING):  # at a rung
            r = c.rungs[-1]
            print(f"candidate {c.id}: {r['decision']} at {r['epochs']:g} epochs, validation "
                  f"accuracy {r['accuracy']:.4f} ({r['reason']})")
        else:
            print(f"candidate {c.id}: {c.status}: {c.error}")
    if not trained:
        print("no candidate trained (the search is finished or nothing was pending)")
    if _CANDIDATE.value is not None and trained and trained[0].status in (Status.FAILED,
                                                                         Status.INFEASIBLE):
        fail(f"candidate {trained[0].id} {trained[0].status}: {trained[0].error}")


def _report(workdir: str) -> None:
    from nas.search.reporting.highlights import Highlights
    from nas.search.reporting.report import to_csv, write_report
    from nas.search.reporting.report_state import mark_current, study_state
    from nas.search.reporting.report_text import summary
    from nas.search.store.study import Study

    study = Study.load(workdir)
    state = study_state(study)
    candidates = study.candidates(with_graphs=False)  # read once, for all three
    marks = Highlights.of(study, candidates, k=10)
    path = write_report(study, candidates=candidates, marks=marks)
    mark_current(study, state)
    if _CSV.value:
        sys.stdout.write(to_csv(study, candidates))
        return
    print(summary(study, candidates=candidates, marks=marks))
    print(f"report: {path}")


def _export(workdir: str) -> None:
    from nas.search.result import candidate_id
    from nas.search.store.export import export_candidate
    from nas.search.store.study import Study

    if _ID.value is None or not _OUT.value:
        raise ValueError("export needs --id and --out")
    if _FORMAT.value not in EXPORT_FORMATS:
        raise ValueError(f"--format: unknown format {_FORMAT.value!r}; expected one of "
                         f"{', '.join(EXPORT_FORMATS)}")
    if _FORMAT.value == "flax":
        from nas.interop.flax_code import check_out_dir

        try:
            check_out_dir(Path(_OUT.value))
        except ValueError as e:
            raise ValueError(f"--out: {e}") from None
    study = Study.load(workdir)
    try:
        cid, why, home = candidate_id(study, _ID.value)
    except ValueError as e:
        raise ValueError(f"--{e}") from None
    if home is not None:
        why += ", the finals' retrain of it (better on validation than the search's weights)"
    try:
        if _FORMAT.value == "flax":
            from nas.search.store.export import export_flax_code

            path = export_flax_code(study, cid, _OUT.value, home)
        else:
            path = export_candidate(study, cid, _OUT.value, home)
    except OSError as e:
        raise ValueError(f"--out: {os_error_line(e)}") from None
    except ValueError as e:
        raise naming_flag(e, f"--id={_ID.value}") from None
    path = Path(path).resolve()
    if _FORMAT.value == "flax":
        print(f"wrote {path}: candidate {cid}{why} as plain Flax code (model.py, "
              f"variables.msgpack); load it without nas with:")
        print("  import sys")
        print("  import flax.serialization")
        print(f"  sys.path.insert(0, {str(path)!r})")
        print("  from model import INPUT_SHAPE, Model")
        print(f"  with open({str(path / 'variables.msgpack')!r}, 'rb') as f:")
        print("      variables = flax.serialization.msgpack_restore(f.read())")
        print("  logits = Model().apply(variables, images)  # images: (batch, *INPUT_SHAPE) "
              "float32")
        return
    cand = study.get(cid)
    held = ["graph", "trained weights" if cand.checkpoint_path else "no weights (none saved)",
            *(["training settings"] if "train" in study.config else []), "metrics"]
    print(f"wrote {path}: candidate {cid}{why} ({', '.join(held)}); load it in Python with:")
    print("  import nas")
    print(f"  candidate = nas.load_candidate({str(path)!r})")
    print("  logits = candidate(images)  # images: (batch, *candidate.input_shape) float32")


def _dashboard(workdir: str) -> None:
    import asyncio

    from nas.search.reporting.dashboard import Dashboard, serve
    from nas.search.store.study import Study

    check_workdir(workdir, create=False)
    dashboard = Dashboard(Study.load(workdir, read_only=True))
    try:
        asyncio.run(serve(dashboard, _HOST.value, _PORT.value))
    except KeyboardInterrupt:  # the way to stop it: no traceback, no line, exit 130
        _exit(INTERRUPTED)


SEVERAL_PROCESSES = (
    "a search over several processes is not supported yet (train.distributed or the NAS_* "
    "environment asks for jax.distributed): run nas-search in one process "
    "(search.executor=ray spreads its candidates over nodes); to train one candidate over "
    "several hosts, export it (nas-search export --id=N --out=CANDIDATE.zip) and run "
    "nas-train --graph=CANDIDATE.zip --workdir=SHARED_DIR in every process, with "
    "NAS_COORDINATOR_ADDRESS, NAS_NUM_PROCESSES and NAS_PROCESS_ID set (docs/cluster.md)")


def join_processes(config: Any) -> None:
    """`jax.distributed` as `train.distributed` and the NAS_* environment ask, for one
    process; more are refused in each (SEVERAL_PROCESSES) before any joins: the driver's
    workers and Ray would not follow it into a program spanning hosts, and a process that
    joined and left would have the others wait for it until jax's timeouts end them."""
    from nas.train import distributed

    train = config.train if config is not None and "train" in config else None
    asked = distributed.settings(distributed.section_of(train), prefix="train.")
    if asked.enabled and asked.num_processes != 1:
        fail(SEVERAL_PROCESSES)
    try:
        distributed.initialize(train, prefix="train.")
    except RuntimeError as e:
        raise ValueError(first_line(e)) from None


def naming_flag(e: ValueError, flag: str) -> ValueError:
    """The study's "candidate_id: no candidate N" as the flag that gave N."""
    text = first_line(e)
    return ValueError(flag + text[len("candidate_id"):] if text.startswith("candidate_id:")
                      else text)


def _main(argv: Sequence[str]) -> None:
    if not FLAGS["verbosity"].present:  # orbax logs every save at INFO; --verbosity=0 shows it
        logging.set_verbosity(logging.WARNING)
    command = argv[1] if len(argv) > 1 else "search"
    actions = {"search": _search, "worker": _worker, "report": _report, "export": _export,
               "dashboard": _dashboard}
    if command not in (*actions, "import") or len(argv) > 2:
        fail(f"unknown command {' '.join(argv[1:])!r}; expected one of {', '.join(COMMANDS)} "
             f"(search is the default)")
    if command == "import":  # writes one file: no study, no workdir
        from nas.interop.cli import import_checked

        try:
            if not _FLAX.value:
                raise ValueError("import needs --flax=package.module:factory")
            print(import_checked(_FLAX.value, _INPUT_SHAPE.value, _VARIABLES.value,
                                 _OUT.value).line())
        except OSError as e:
            fail(os_error_line(e))
        except ValueError as e:
            fail(first_line(e))
        sys.stdout.flush()
        return
    if not _WORKDIR.value:
        fail("--workdir is required")
    interrupts = _count_interrupts()
    try:
        if command in ("search", "worker"):  # the commands that train
            join_processes(_CONFIG.value if command == "search" else None)
        actions[command](_WORKDIR.value)
        if interrupts:  # raised where something swallowed it: the work went on, say so
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        fail(f"interrupted; the study in {_WORKDIR.value} is resumable (run the same command "
             f"again)", INTERRUPTED)
    except OSError as e:
        fail(os_error_line(e, _WORKDIR.value))
    except ValueError as e:
        fail(first_line(e))
    sys.stdout.flush()


def _count_interrupts() -> list[int]:
    """Ctrl-C raises KeyboardInterrupt and is also recorded in the returned list, so one
    swallowed on its way (a bare `except:`, a `__del__`) still ends the command as one."""
    received: list[int] = []

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if _swallowing(frame):  # raised here it would print "Exception ignored" and vanish
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
            return
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_sigint)
    return received


def _swallowing(frame: FrameType | None) -> bool:
    """Whether Python would print an exception raised in `frame` as "Exception ignored" and
    lose it: inside a garbage collector callback (jax registers one) or a `__del__`."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def main() -> None:
    try:
        app.run(_main, flags_parser=_parse)
    except KeyboardInterrupt:  # during flag parsing or imports
        fail("interrupted", INTERRUPTED)


if __name__ == "__main__":
    main()
