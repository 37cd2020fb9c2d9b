"""`nas-train`: train and evaluate one candidate from the command line.

    nas-train --config=configs/digits_cnn.py --workdir=/tmp/run [--config.lr=3e-3]
              [--graph=candidate.json]

A bad config or graph file prints one line to stderr and exits with status 1 (no
traceback). To add subcommand-like flags (e.g. --study/--candidate), define them next to
the others and branch in `run()` before the default path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Training config file (configs/*.py[:arg]).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go.")
_GRAPH = flags.DEFINE_string("graph", None, "Graph JSON to train instead of the config's model.")
_STUDY = flags.DEFINE_string("study", None, "A search workdir: train one of its candidates.")
_CANDIDATE = flags.DEFINE_integer("candidate", None, "With --study: the candidate id to train.")
_NEXT = flags.DEFINE_bool("next", False, "With --study: claim the next pending candidate.")


class UserError(Exception):
    """An error in what the user gave us: printed as one line, exit status 1."""


def _fail(message: str) -> None:
    print(f"nas-train: error: {message}", file=sys.stderr)
    sys.exit(1)


def _parse(argv: Sequence[str]) -> list[str]:
    """absl flag parsing whose errors (e.g. a config file that fails to load) are one line."""
    try:
        rest = FLAGS(list(argv))
        if FLAGS["config"].present:
            FLAGS.config.keys()  # a config file that failed to load raises only when used
        return rest
    except flags.Error as e:
        _fail(_first_line(e))
    except (AttributeError, KeyError) as e:  # an override of a field the config lacks
        _fail(f"--config: unknown config field {str(e.args[0]).strip(chr(34) + chr(39))!r}")
    except Exception as e:  # a config file missing, or raising while it is executed
        _fail(f"--config: {_last_line(e)}")
    return []


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def _last_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def format_table(metrics: dict, epochs: int) -> str:
    """A two-column table of the final metrics, for humans."""
    rows = [
        ("accuracy", f"{metrics['acc'] * 100:.2f} %"),
        ("eval loss", f"{metrics['loss']:.4f}"),
        ("parameters", f"{metrics['num_params']:,}"),
        ("FLOPs / example", f"{metrics['flops']:,}"),
        ("train images/sec/core", f"{metrics['im_sec_core_train']:.1f}"),
        ("infer images/sec/core", f"{metrics['im_sec_core_infer']:.1f}"),
        ("compile seconds", f"{metrics['compile_seconds']:.2f}"),
        ("train step peak MiB", f"{metrics['train_peak_bytes'] / 2**20:.1f}"),
        ("train seconds", f"{metrics['train_seconds']:.1f}"),
        ("epochs / steps", f"{epochs} / {metrics['steps']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def read_graph_file(path: str) -> tuple:
    """(graph, constants, variables or None). A candidate exported by `nas-search export`
    also carries the path of its trained variables; training then starts from them."""
    import json

    from nas.graph import serialize
    from nas.train.checkpoint import load_variables

    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise UserError(f"--graph: cannot read {path}: {e.strerror}") from None
    graph, constants = serialize.load(text)
    doc = json.loads(text)
    checkpoint = doc.get("checkpoint_path") if doc.get("format") == "nas-candidate" else None
    if not checkpoint:
        return graph, constants, None
    print(f"starting from the exported candidate's weights: {checkpoint}")
    return graph, constants, load_variables(checkpoint)


def run_study_worker() -> None:
    """Trains one candidate of a search study (a worker outside the driver). The study logic
    lives in nas.search; it is imported only here, so nas.train does not depend on it."""
    from nas.search.driver import train_from_study

    if _NEXT.value == (_CANDIDATE.value is not None):
        raise UserError("--study needs exactly one of --next or --candidate=N")
    candidate = train_from_study(_STUDY.value, candidate_id=_CANDIDATE.value)
    if candidate is None:
        print("no pending candidate")
        return
    if candidate.status != "done":
        raise UserError(f"candidate {candidate.id} failed: {candidate.error}")
    print(f"candidate {candidate.id}: accuracy {candidate.accuracy:.4f}, "
          f"FLOPs {candidate.flops:,.0f}, params {candidate.params:,.0f}")


def run() -> None:
    """The default action: train the config's model (or --graph) and print the table."""
    from nas.train import train_and_eval

    if _STUDY.value:
        run_study_worker()
        return
    config = _CONFIG.value
    if config is None:
        raise UserError("--config is required")
    graph = constants = init = None
    if _GRAPH.value:
        graph, constants, init = read_graph_file(_GRAPH.value)
    metrics, epochs, _ = train_and_eval(config, graph=graph, constants=constants,
                                        workdir=_WORKDIR.value, init_variables=init)
    print(format_table(metrics.to_dict(), epochs))


def _main(argv: Sequence[str]) -> None:
    if not FLAGS["verbosity"].present:  # orbax logs every save at INFO; --verbosity=0 shows it
        logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        run()
    except (ValueError, UserError) as e:
        _fail(_first_line(e))


def main() -> None:
    """Console-script entry point."""
    app.run(_main, flags_parser=_parse)


if __name__ == "__main__":
    main()
