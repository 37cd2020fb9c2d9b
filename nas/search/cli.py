"""`nas-search`: run (or resume) an evolution search, report on it, export a candidate.

    nas-search --config=configs/digits_cnn_search.py --workdir=DIR [--config.search.x=...]
               [--seed_graph=FILE.json]
    nas-search report --workdir=DIR [--csv]
    nas-search export --workdir=DIR --id=N --out=FILE.json

Running the search command on an existing workdir resumes it. Bad input prints one line to
stderr and exits with status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file("config", None, "Search config file.",
                                          lock_config=False)
_WORKDIR = flags.DEFINE_string("workdir", None, "The study directory (created or resumed).")
_ID = flags.DEFINE_integer("id", None, "Candidate id (export).")
_OUT = flags.DEFINE_string("out", None, "Output file (export).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")
_SEED_GRAPH = flags.DEFINE_string(
    "seed_graph", None, "Start the population from this graph JSON or `nas-search export` "
    "file (with its weights when it has them); same as --config.search.seed_graph.")
_CSV = flags.DEFINE_bool("csv", False, "report: print every candidate as CSV on stdout "
                         "(the HTML report and report.csv are written too).")


def _fail(message: str) -> None:
    print(f"nas-search: error: {message}", file=sys.stderr)
    sys.exit(1)


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _parse(argv: Sequence[str]) -> list[str]:
    try:
        rest = FLAGS(list(argv))
        if FLAGS["config"].present:
            FLAGS.config.keys()
        return rest
    except flags.Error as e:
        _fail(_first_line(e))
    except (AttributeError, KeyError) as e:
        _fail(f"--config: unknown config field {str(e.args[0]).strip(chr(39))!r}")
    except Exception as e:  # noqa: BLE001 - a config file that fails to load
        _fail(f"--config: {_first_line(e)}")
    return []


def _search(workdir: str) -> None:
    from nas.search.driver import run_search
    from nas.search.report import summary, write_report

    if _CONFIG.value is None:
        raise ValueError("--config is required to run a search")
    config = _CONFIG.value
    if _SEED_GRAPH.value:
        config.search.seed_graph = _SEED_GRAPH.value
    study = run_search(config, workdir, progress=_PROGRESS.value)
    print(summary(study))
    print(f"report: {write_report(study)}")


def _report(workdir: str) -> None:
    from nas.search.report import summary, to_csv, write_report
    from nas.search.study import Study

    study = Study.load(workdir)
    path = write_report(study)
    if _CSV.value:
        sys.stdout.write(to_csv(study))
        return
    print(summary(study))
    print(f"report: {path}")


def _export(workdir: str) -> None:
    from nas.search.study import Study

    if _ID.value is None or not _OUT.value:
        raise ValueError("export needs --id and --out")
    print(Study.load(workdir).export(_ID.value, _OUT.value))


def _main(argv: Sequence[str]) -> None:
    if not FLAGS["verbosity"].present:  # orbax logs every save at INFO; --verbosity=0 shows it
        logging.set_verbosity(logging.WARNING)
    command = argv[1] if len(argv) > 1 else "search"
    actions = {"search": _search, "report": _report, "export": _export}
    if command not in actions or len(argv) > 2:
        _fail(f"unknown command {' '.join(argv[1:])!r}; expected report, export or none")
    if not _WORKDIR.value:
        _fail("--workdir is required")
    try:
        actions[command](_WORKDIR.value)
    except ValueError as e:
        _fail(_first_line(e))


def main() -> None:
    app.run(_main, flags_parser=_parse)


if __name__ == "__main__":
    main()
