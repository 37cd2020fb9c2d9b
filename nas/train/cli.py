"""`nas-train`: train and evaluate one candidate from the command line.

usage:
  nas-train --config=configs/digits_cnn.py --workdir=/tmp/run [--config.lr=3e-3]
            [--graph=graph.json]
  nas-train --graph=candidate.zip --workdir=/tmp/run [--config.total_epochs=3]

main flags:
  --config=FILE[:arg]   training config (configs/*.py); --config.F=V overrides a field
  --workdir=DIR         where checkpoints and metrics go (training resumes from them)
  --graph=FILE          train this graph: a serialized graph, or a candidate exported by
                        `nas-search export`, which starts from its trained weights and
                        trains with its own settings (--config.F=V overrides one of
                        them; a --config=FILE then gives only its overrides)
  --noprogress          no progress bar of the training steps
  --helpfull            every flag, absl's included

The settings a run uses are printed before it starts, once every mistake that can be found
without training has been looked for. At the end it prints each accuracy with the split it
was measured on, its 95 % Wilson interval and the number of examples n: the config's
`eval.data.split` (a candidate exported by a search evaluates on its validation split,
`holdout`, and then also on its test split, `eval.test_split`), the loss there, and the
cost (parameters, FLOPs, images/sec/core).

Over several hosts, one candidate as one program: run the same command in every process
with NAS_COORDINATOR_ADDRESS=HOST0:PORT, NAS_NUM_PROCESSES=N and NAS_PROCESS_ID=I (or
--config.distributed.F=V) and a workdir on a shared filesystem; only process 0 writes
there (docs/cluster.md).

Training knows nothing of searches: study workers are `nas-search worker`. A bad config,
graph or file prints one line (`nas-train: error: ...`) and exits 1; Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import ml_collections
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
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Training config file (configs/*.py[:arg]).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go.")
_GRAPH = flags.DEFINE_string("graph", None, "Graph JSON to train instead of the config's model.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar of the training steps.")


class UserError(Exception):
    """An error in what the user gave us: printed as one line, exit status 1."""


def _fail(message: str, code: int = 1) -> None:
    """One line on stderr, then exit at once (no tracebacks from library threads at exit)."""
    message = re.sub(r"\s*\[tensorstore_spec=.*", "", message)  # orbax's internals
    if len(message) > 600:
        message = message[:597] + "..."
    print(f"nas-train: error: {message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)


EXPORTED_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exported_config.py")


def with_exported_config(argv: Sequence[str]) -> list[str]:
    """`argv` with `--config=<exported_config.py>:<candidate>` added when it overrides
    fields (`--config.F=V`) of a `--graph` candidate without naming a `--config=FILE`:
    absl takes overrides only of a config file, and the candidate's own settings are the
    ones they override (`nas.train.exported_config`)."""
    args = list(argv)
    flagged = [a for a in args[1:] if a.startswith("--config.")]
    named = any(a == "--config" or a.startswith("--config=") for a in args[1:])
    graph = None
    for i, a in enumerate(args[1:], start=1):
        if a.startswith("--graph="):
            graph = a.split("=", 1)[1]
        elif a == "--graph" and i + 1 < len(args):
            graph = args[i + 1]
    if not flagged or named or not graph:
        return args
    return [args[0], f"--config={EXPORTED_CONFIG}:{os.path.abspath(graph)}", *args[1:]]


def _exported_config_used() -> bool:
    return bool(FLAGS["config"].present) and str(
        FLAGS["config"].config_filename).startswith(f"{EXPORTED_CONFIG}:")


def _parse(argv: Sequence[str]) -> list[str]:
    """absl flag parsing whose errors (e.g. a config file that fails to load) are one line."""
    if any(a in ("--help", "-h", "-?", "--help=true") for a in argv[1:]):
        print(__doc__.strip())
        sys.exit(0)
    given, argv = list(argv), with_exported_config(argv)
    try:
        rest = FLAGS(list(argv))
        if FLAGS["config"].present:
            FLAGS.config.keys()  # a config file that failed to load raises only when used
        return rest
    except (AttributeError, KeyError) as e:  # an override of a field the config lacks
        _fail(unknown_field_line(e, argv))
    except Exception as e:  # noqa: BLE001 - a config file missing or raising when run
        line = _last_line(e)
        if argv != given and "--graph:" in line:  # the candidate's settings cannot be read
            _fail(line[line.index("--graph:"):])
        if isinstance(e, flags.Error):
            _fail(flag_error_line(e))
        named = [a.split("=", 1)[1].split(":", 1)[0] for a in argv if a.startswith("--config=")]
        if named and not os.path.isfile(named[-1]):
            _fail(f"--config: {named[-1]}: No such file or directory")
        _fail(f"--config: {_last_line(e)}")
    return []


def _last_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def split_kind(config: ml_collections.ConfigDict) -> str:
    """What the eval split (`eval.data.split`) is to a reader: "validation" when it is
    carved out of the training split or a test split is evaluated beside it (a search's
    candidates), "test" for a split named so, else "eval"."""
    from nas.train.data import HOLDOUT

    split = str(config.eval.data.split)
    if split == HOLDOUT or config.eval.test_split or split.startswith("validation"):
        return "validation"
    return "test" if split.startswith("test") else "eval"


def split_text(config: ml_collections.ConfigDict, split: str) -> str:
    """Which examples a split is, e.g. `split 'holdout': 0.1 of 'train', never trained on`."""
    from nas.train.data import HOLDOUT

    if split == HOLDOUT:
        return (f"split {split!r}: {float(config.input.data.validation_fraction):g} of "
                f"{config.input.data.split!r}, never trained on")
    return f"split {split!r}"


def accuracy_rows(metrics: dict, config: ml_collections.ConfigDict | None
                  ) -> list[tuple[str, str]]:
    """(name, value) rows of every accuracy and loss measured, each accuracy naming its
    split, with its 95 % Wilson interval and n."""
    from nas.stats.intervals import percent_text

    def accuracy(acc: float, n: int, where: str) -> str:
        return percent_text(acc, n, where) if n else f"{acc * 100:.2f} % ({where})"

    if config is None:
        kind, where = "eval", "the config's eval.data.split"
    else:
        kind, where = split_kind(config), split_text(config, str(config.eval.data.split))
    rows = [(f"{kind} accuracy", accuracy(metrics["accuracy"], int(metrics.get("val_examples", 0)),
                                          where)),
            (f"{kind} loss", f"{metrics['loss']:.4f}")]
    if metrics.get("test_examples"):
        test = split_text(config, str(config.eval.test_split)) if config else "eval.test_split"
        rows += [("test accuracy", accuracy(metrics["test_accuracy"], int(metrics["test_examples"]),
                                            test)),
                 ("test loss", f"{metrics['test_loss']:.4f}" if metrics["test_loss"] >= 0
                  else "not measured (the loss reads extras the test split has not)")]
    return rows


def format_table(metrics: dict, epochs: int,
                 config: ml_collections.ConfigDict | None = None) -> str:
    """A two-column table of the final metrics, for humans: every accuracy names its split
    (from `config`, the training config the run used), interval and size."""
    rows = [
        *accuracy_rows(metrics, config),
        ("parameters", f"{metrics['params']:,}"),
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


def read_graph_file(path: str) -> tuple[Any, dict[str, Any], dict[str, Any] | None,
                                        dict[str, Any] | None]:
    """(graph, constants, variables, training settings) from --graph: a candidate exported
    by `nas-search export` (`nas.io`) brings its trained weights and the settings it was
    trained with; a plain serialized graph brings neither (None, None)."""
    from nas.graph import serialize
    from nas.io.candidate import read_graph_or_export_for

    found = read_graph_or_export_for("--graph", path)  # its messages name the file and field
    if not isinstance(found, bytes):
        return found.graph, found.constants, found.variables, found.train_config
    try:  # not JSON, or not a graph: serialize.load says why
        graph, constants = serialize.load(found)
    except ValueError as e:
        raise UserError(f"--graph: {path}: {e}") from None
    return graph, constants, None, None


def check_config(config: Any) -> ml_collections.ConfigDict:
    """The training config with defaults and `num_classes` from the data when it is 0,
    refused before anything is written when training would fail on it later: its type,
    its fields (`nas.train.config.validate`), a dataset that does not hold a batch or
    whose classes disagree with `num_classes`."""
    from nas.train import config as config_lib
    from nas.train import data as data_lib

    if not isinstance(config, ml_collections.ConfigDict):
        raise UserError(f"--config: get_config() must return an ml_collections.ConfigDict, "
                        f"got {type(config).__name__}")
    train = config_lib.with_defaults(config.train if "train" in config else config)
    data_lib.check_dataset(train)
    return data_lib.with_num_classes(train)


def check_logits(graph: Any, constants: Any, config: ml_collections.ConfigDict) -> None:
    """--graph's logits must have `num_classes` entries (else the loss fails in a trace)."""
    from nas.train import preflight

    try:
        preflight.check_outputs(graph, constants, config, f"--graph: {_GRAPH.value}")
    except ValueError as e:
        raise UserError(str(e)) from None


def training_settings(config: Any, exported: dict[str, Any] | None
                      ) -> tuple[ml_collections.ConfigDict, str, list[str]]:
    """(training config, where it came from, fields set on the command line).

    A candidate exported with its training settings trains with them, so that going on
    from its weights continues the run it had (e.g. a search's children fine-tune at
    `search.child_lr`); only `--config.F=V` overrides change them. Without such settings
    the --config file is the training config, as for any model."""
    overrides = {}
    if config is not None:
        prefix = "train." if "train" in config else ""
        overrides = {k.removeprefix(prefix): v
                     for k, v in config_flags.get_override_values(FLAGS["config"]).items()
                     if k.startswith(prefix)}
    if exported is None:
        if config is None:
            raise UserError("--config is required (unless --graph is a candidate exported "
                            "with its training settings)")
        source = f"--config={FLAGS['config'].config_filename}"
        return check_config(config), source, sorted(overrides)
    try:  # the file's settings alone first, so that an error names the right culprit
        train = check_config(ml_collections.ConfigDict(exported))
    except ValueError as e:
        raise UserError(f"--graph: {_GRAPH.value}: field 'train_config': {e}") from None
    source = f"the candidate's own, from {_GRAPH.value}"
    if config is not None and not _exported_config_used():
        source += "; --config gives only its --config.F=V overrides"
    if not overrides:
        return train, source, []
    settings = train.to_dict()
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = settings
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return check_config(ml_collections.ConfigDict(settings)), source, sorted(overrides)


# The settings that decide how a run trains, as printed before it starts (all of them go to
# the workdir's config.json once training starts).
SHOWN = ("input.data.name", "input.data.split", "eval.data.split", "eval.test_split",
         "input.image_size",
         "input.batch_size", "input.augment", "num_classes", "total_epochs", "optax_name",
         "optax", "lr", "schedule", "wd", "wd_pattern", "grad_clip_norm", "frozen_pattern",
         "ema_decay", "precise_bn_batches", "seed", "trainer", "compute_dtype")


def format_settings(train: ml_collections.ConfigDict, source: str, overridden: list[str],
                    workdir: str | None = None) -> str:
    """One block naming where the settings come from and what they are. (`workdir` is
    not named here: its config.json is written only once training starts, and the run
    names it at the end.)"""
    lines = [f"training settings ({source}):"]
    width = max(len(k) for k in SHOWN)
    for key in SHOWN:
        value = train
        for name in key.split("."):
            value = value[name]
        if key == "eval.test_split" and not value:
            continue  # shown where a test split is evaluated too (a search's candidates)
        if isinstance(value, ml_collections.ConfigDict):
            value = value.to_dict()
        mark = "  (command line)" if key in overridden else ""
        lines.append(f"  {key:<{width}}  {value!r}{mark}")
    others = [k for k in overridden if k not in SHOWN]
    if others:
        lines.append(f"  also set on the command line: {', '.join(others)}")
    del workdir
    return "\n".join(lines)


def join_processes() -> None:
    """Join a run over several processes when the config's `distributed` section or the
    NAS_* environment asks for one (`nas.train.distributed`), before reading a candidate's
    weights or the data can touch a device. A --graph candidate's own settings hold no
    process of their own: its `distributed` fields come from the command line."""
    from nas.train import distributed

    config = _CONFIG.value
    if config is not None and "train" in config:
        config, prefix = config.train, "train."
    else:
        prefix = ""
    try:
        distributed.initialize(config, prefix=prefix)
    except RuntimeError as e:  # the coordinator not reached in time, say
        raise UserError(first_line(e)) from None


def run() -> None:
    """The default action: train the config's model (or --graph) and print the table.
    Every check that needs no training runs before the first line is printed."""
    from nas.train import preflight
    from nas.train.options import TrainOptions
    from nas.train.train import train_and_eval

    join_processes()
    graph = constants = init = exported = None
    if _GRAPH.value:
        graph, constants, init, exported = read_graph_file(_GRAPH.value)
    train, source, overridden = training_settings(_CONFIG.value, exported)
    if graph is not None:
        check_logits(graph, constants, train)
    graph, constants = preflight.check(train, graph, constants)
    if _WORKDIR.value:
        check_workdir(_WORKDIR.value, create=True)
    print(format_settings(train, source, overridden))
    for note in preflight.schedule_notes(train):  # a warmup longer than the run, shortened
        print(note)
    if init is not None:
        print("starting from the exported candidate's trained weights", flush=True)
    sys.stdout.flush()
    options = TrainOptions(graph=graph, constants=constants, workdir=_WORKDIR.value,
                           init_variables=init, progress=_PROGRESS.value)
    metrics, epochs, _ = train_and_eval(train, options=options)
    print(format_table(metrics.record(), epochs, train))
    settings = os.path.join(_WORKDIR.value or "", "config.json")
    if _WORKDIR.value and os.path.isfile(settings):
        print(f"every setting of this run: {settings}")


def _main(argv: Sequence[str]) -> None:
    if not FLAGS["verbosity"].present:  # orbax logs every save at INFO; --verbosity=0 shows it
        logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        run()
    except KeyboardInterrupt:
        _fail("interrupted (run the same command again to resume from the workdir)", 130)
    except OSError as e:
        _fail(os_error_line(e, _WORKDIR.value))
    except (ValueError, UserError) as e:
        _fail(first_line(e))


def main() -> None:
    """Console-script entry point."""
    try:
        app.run(_main, flags_parser=_parse)
    except KeyboardInterrupt:
        _fail("interrupted", 130)


if __name__ == "__main__":
    main()
