"""End-to-end train_and_eval on the bundled digits with a tiny graph, and the CLI."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import AT_32, tiny_config, tiny_graph

from nas.graph.serialize import graph_to_json
from nas.train import Metrics, TrainOptions, train_and_eval


@pytest.fixture(scope="module")
def parent(data_dir, tmp_path_factory):
    graph, constants = tiny_graph(with_bn=True)
    workdir = str(tmp_path_factory.mktemp("parent"))
    metrics, epochs, state = train_and_eval(tiny_config(data_dir, total_epochs=2.0, **AT_32),
                                            options=TrainOptions(graph=graph, constants=constants,
                                                                 workdir=workdir))
    return metrics, epochs, state, workdir


def test_trains_and_measures(parent):
    metrics, epochs, state, workdir = parent
    assert isinstance(metrics, Metrics) and epochs == 2
    assert metrics.acc > 0.6  # a linear-ish model on digits after 2 epochs
    assert metrics.num_params == 3 * 3 * 3 * 8 + 8 + 2 * 8 + 8 * 8 * 8 * 10 + 10
    assert metrics.flops > 0 and metrics.im_sec_core_train > 0 and metrics.im_sec_core_infer > 0
    assert metrics.train_peak_bytes >= metrics.train_temp_bytes > 0
    assert set(state) == {"params", "batch_stats"} and "bn" in state["batch_stats"]
    lines = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    assert any("training_loss" in r for r in lines)
    assert [r["epoch"] for r in lines if "accuracy" in r] == [1, 2]
    assert os.path.exists(os.path.join(workdir, "config.json"))


def test_inherits_and_freezes_parent_weights(parent, data_dir):
    _, _, pstate, _ = parent
    graph, constants = tiny_graph(with_bn=True, features=8)
    _, _, state = train_and_eval(tiny_config(data_dir, total_epochs=0.2, **AT_32), eval_perf=False,
                                 options=TrainOptions(graph=graph, constants=constants,
                                                      init_variables=pstate, freeze_inherited=True))
    for op in ("conv", "logits"):  # all inherited and frozen: unchanged
        for name, value in pstate["params"][op].items():
            np.testing.assert_array_equal(state["params"][op][name], value)


def test_inherits_only_matching_shapes_and_finetunes(parent, data_dir):
    _, _, pstate, _ = parent
    graph, constants = tiny_graph(with_bn=True, features=4)  # conv and logits change shape
    config = tiny_config(data_dir, total_epochs=0.2, **AT_32)
    metrics, _, state = train_and_eval(config, eval_perf=False,
                                       options=TrainOptions(graph=graph, constants=constants,
                                                            init_variables=pstate, freeze={"bn"}))
    assert state["params"]["conv"]["kernel"].shape == (3, 3, 3, 4)
    assert metrics.acc > 0.0


def test_complete_starting_variables_are_used_as_they_are(parent):
    """A search child arrives with every variable (the driver fitted its new ops): those
    values are its start, whatever a fresh initialization would draw. A partial set gets a
    fresh initialization (setup_trainer then inherits what matches)."""
    from nas.graph import Model
    from nas.train.train import _init_variables

    _, _, pstate, _ = parent
    model = Model(*tiny_graph(with_bn=True))
    start = _init_variables(model, (32, 32, 3), seed=0, parent=pstate)
    for collection, ops in pstate.items():
        for op, leaves in ops.items():
            for name, value in leaves.items():
                np.testing.assert_array_equal(start[collection][op][name], value)
    partial = {"params": {k: v for k, v in pstate["params"].items() if k != "logits"}}
    fresh = _init_variables(model, (32, 32, 3), seed=0, parent={})
    start = _init_variables(model, (32, 32, 3), seed=0, parent=partial)
    for op in ("conv", "logits"):
        np.testing.assert_array_equal(start["params"][op]["kernel"],
                                      fresh["params"][op]["kernel"])
    assert not np.array_equal(fresh["params"]["conv"]["kernel"],
                              pstate["params"]["conv"]["kernel"])


def test_callback_stops_early(data_dir):
    graph, constants = tiny_graph()
    calls = []

    def callback(epoch, metrics):
        calls.append((epoch, metrics.acc))
        return False

    _, epochs, _ = train_and_eval(tiny_config(data_dir, total_epochs=3.0), eval_perf=False,
                                  callback=callback,
                                  options=TrainOptions(graph=graph, constants=constants))
    assert epochs == 1 and len(calls) == 1


def test_bad_freeze_name_is_value_error(data_dir):
    graph, constants = tiny_graph()
    with pytest.raises(ValueError, match="freeze"):
        train_and_eval(tiny_config(data_dir), options=TrainOptions(graph=graph, constants=constants,
                                                                   freeze={"nope"}))


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "nas.train.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def _error_lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("nas-train: error:")]


BAD_CONFIGS = [
    (["--config=configs/missing.py"], "No such file"),
    (["--config=configs/digits_cnn.py", "--config.bogus=1"], "unknown config field 'bogus'"),
    (["--config=configs/digits_cnn.py", "--config.trainer=magic"], "'trainer'"),
    (["--config=configs/digits_cnn.py", "--config.model.depth=4"],
     "unknown config field 'model.depth'"),
]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """nas-train's main on each of BAD_CONFIGS, then on a graph file that is not JSON, each
    in a fork of one process that imported it (`probe_cli`: a subprocess per case would
    import jax for each); test_cli_trains_a_graph_file_and_prints_table runs the real
    program."""
    from tests.search.conftest import probe_cli

    bad = tmp_path_factory.mktemp("bad_graph") / "g.json"
    bad.write_text("{not json")
    cases = [args for args, _ in BAD_CONFIGS]
    cases.append(["--config=configs/digits_cnn.py", f"--graph={bad}"])
    return probe_cli(cases, prog="nas-train")


@pytest.mark.parametrize("case", range(len(BAD_CONFIGS)),
                         ids=[m for _, m in BAD_CONFIGS])
def test_cli_bad_config_is_one_line_and_exit_1(bad_runs, case):
    proc, match = bad_runs[case], BAD_CONFIGS[case][1]
    assert proc.returncode == 1
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and match in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_cli_bad_graph_file(bad_runs):
    proc = bad_runs[-1]
    assert proc.returncode == 1 and len(_error_lines(proc.stderr)) == 1
    assert "Traceback" not in proc.stderr


def test_cli_trains_a_graph_file_and_prints_table(data_dir, tmp_path):
    graph, constants = tiny_graph()
    path = tmp_path / "g.json"
    path.write_text(graph_to_json(graph, constants))
    proc = _cli("--config=configs/digits_cnn.py", f"--graph={path}",
                f"--workdir={tmp_path / 'w'}", f"--config.input.data_dir={data_dir}",
                "--config.total_epochs=0.3", "--config.schedule.warmup_steps=0",
                "--noprogress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for key in ("accuracy", "FLOPs / example", "parameters", "train images/sec/core"):
        assert key in proc.stdout
    # the config evaluates on its test split, all 360 digits: the line says so
    assert re.search(r"^test accuracy +\d+\.\d\d % \(95 % interval \d+\.\d\d-\d+\.\d\d %, "
                     r"n=360; split 'test'\)$", proc.stdout, re.M), proc.stdout
    assert "step/s" not in proc.stderr and "s/step" not in proc.stderr  # --noprogress
    assert proc.stdout.splitlines()[-1] == f"every setting of this run: {tmp_path}/w/config.json"
