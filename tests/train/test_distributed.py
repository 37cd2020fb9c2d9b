"""Joining a run over several processes (`nas.train.distributed`): its settings, checked in
one line naming the field; nothing done when nothing is set; the NAS_* environment; and
(slow) two `nas-train` processes on this machine training one candidate."""

import json
import os
import socket
import subprocess
import sys

import pytest

from nas.train import config as config_lib
from nas.train import distributed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def jax_calls(monkeypatch):
    """jax.distributed's initialize recorded instead of run, with no NAS_* variable set."""
    import jax

    for var in distributed.ENV.values():
        monkeypatch.delenv(var, raising=False)
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: bool(calls))
    return calls


@pytest.mark.parametrize("field, value, expected", [
    ("coordinator_address", "host", "'HOST:PORT'"),
    ("coordinator_address", "host:0", "port 1..65535"),
    ("coordinator_address", 1234, "a string"),
    ("num_processes", -1, "an int >= 0"),
    ("num_processes", "2", "an int >= 0"),
    ("process_id", -2, "an int >= -1"),
    ("process_id", True, "an int >= -1"),
    ("local_device_ids", "0;1", "'0,1'"),
    ("local_device_ids", [0, 1], "a string"),
    ("cluster_detection", "magic", "one of '', 'auto'"),
])
def test_a_bad_field_is_one_line_naming_it(field, value, expected):
    for check in (lambda: config_lib.with_defaults({"distributed": {field: value}}),
                  lambda: distributed.settings({field: value}, environ={})):
        with pytest.raises(ValueError) as e:
            check()
        line = str(e.value)
        assert "\n" not in line and f"config field 'distributed.{field}'" in line, line
        assert expected in line and "got" in line, line


def test_an_unknown_field_is_named():
    with pytest.raises(ValueError, match=r"'distributed\.port' is unknown"):
        config_lib.with_defaults({"distributed": {"port": 1}})
    with pytest.raises(ValueError, match=r"'train\.distributed\.port' is unknown"):
        distributed.settings({"port": 1}, environ={}, prefix="train.")


@pytest.mark.parametrize("section, env, match", [
    ({"coordinator_address": "h:1"}, {}, r"'distributed\.num_processes'.* >= 1"),
    ({"coordinator_address": "h:1", "num_processes": 2}, {}, r"'distributed\.process_id'.*0\.\.1"),
    ({"coordinator_address": "h:1", "num_processes": 2, "process_id": 2}, {}, r"0\.\.1.*got 2"),
    ({"process_id": 1}, {}, r"'distributed\.coordinator_address'.*process_id is set"),
    ({}, {"NAS_NUM_PROCESSES": "2"}, r"NAS_COORDINATOR_ADDRESS.*num_processes is set"),
    ({}, {"NAS_NUM_PROCESSES": "two"}, r"^environment variable NAS_NUM_PROCESSES "
                                       r"\(distributed\.num_processes\) must be an int"),
    ({}, {"NAS_COORDINATOR_ADDRESS": "h"}, r"NAS_COORDINATOR_ADDRESS.*'HOST:PORT'"),
    ({"cluster_detection": "auto", "num_processes": 2, "process_id": 5}, {}, r"< num_proc"),
])
def test_settings_that_do_not_fit_together_are_one_line(section, env, match):
    with pytest.raises(ValueError, match=match) as e:
        distributed.settings(section, environ=env)
    assert "\n" not in str(e.value)


def test_nothing_configured_initializes_nothing(jax_calls):
    assert not distributed.settings(config_lib.base_config().distributed).enabled
    assert distributed.initialize(config_lib.base_config()) is False
    assert distributed.initialize(None) is False
    assert distributed.initialize(config_lib.with_defaults({"lr": 0.1})) is False
    assert jax_calls == []
    distributed.check_joined(config_lib.base_config())  # nothing asked: nothing to join


def test_explicit_settings_initialize_once_with_no_detection(jax_calls):
    config = config_lib.base_config()
    config.distributed.update(coordinator_address="10.0.0.1:1234", num_processes=2,
                              process_id=1, local_device_ids="0, 1")
    assert distributed.initialize(config, environ={}) is True
    assert distributed.initialize(config, environ={}) is True  # a second call: nothing
    assert jax_calls == [{"coordinator_address": "10.0.0.1:1234", "num_processes": 2,
                          "process_id": 1, "local_device_ids": [0, 1],
                          "cluster_detection_method": "deactivate"}]


def test_the_environment_fills_what_the_config_leaves_at_its_default(jax_calls):
    config = config_lib.base_config()
    config.distributed.num_processes = 4  # the config's own value wins over the variable
    env = {"NAS_COORDINATOR_ADDRESS": "[::1]:8476", "NAS_NUM_PROCESSES": "2",
           "NAS_PROCESS_ID": "3"}
    assert distributed.initialize(config, environ=env)
    assert jax_calls == [{"coordinator_address": "[::1]:8476", "num_processes": 4,
                          "process_id": 3, "local_device_ids": None,
                          "cluster_detection_method": "deactivate"}]


def test_cluster_detection_leaves_the_rest_to_jax(jax_calls):
    assert distributed.initialize(None, environ={"NAS_CLUSTER_DETECTION": "auto"})
    assert jax_calls == [{"coordinator_address": None, "num_processes": None,
                          "process_id": None, "local_device_ids": None,
                          "cluster_detection_method": None}]


def test_a_script_that_initialized_jax_distributed_itself_is_left_alone(jax_calls,
                                                                         monkeypatch):
    import jax

    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    config = config_lib.base_config()
    config.distributed.update(coordinator_address="h:1", num_processes=2, process_id=0)
    assert distributed.initialize(config) is True and jax_calls == []
    distributed.check_joined(config)


def test_jax_s_refusal_is_one_line_naming_the_call(monkeypatch):
    import jax

    def refuse(**kw):
        raise RuntimeError("jax.distributed.initialize() must be called before any JAX "
                           "calls\nthat might initialise the XLA backend.")

    monkeypatch.setattr(jax.distributed, "initialize", refuse)
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match=r"^jax\.distributed\.initialize\(coordinator_"
                                           r"address='h:1', .*must be called before") as e:
        distributed.initialize(None, environ={"NAS_COORDINATOR_ADDRESS": "h:1",
                                              "NAS_NUM_PROCESSES": "2",
                                              "NAS_PROCESS_ID": "0"})
    assert "\n" not in str(e.value)


def test_a_config_that_asks_for_processes_not_joined_is_refused_by_train_and_eval():
    from nas.train import train_and_eval

    config = config_lib.base_config()
    config.distributed.update(coordinator_address="h:1", num_processes=2, process_id=0)
    with pytest.raises(ValueError, match="jax.distributed is not initialized"):
        train_and_eval(config)


def test_nas_train_reports_a_bad_variable_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "NAS_PROCESS_ID": "first"}
    proc = subprocess.run([sys.executable, "-m", "nas.train.cli",
                           f"--config={ROOT}/configs/digits_cnn.py",
                           f"--workdir={tmp_path}/w"], capture_output=True, text=True,
                          env=env, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0] == ("nas-train: error: environment variable NAS_PROCESS_ID "
                        "(distributed.process_id) must be an int >= -1 (-1: unset), got "
                        "'first'"), lines
    assert proc.stdout == "" and not (tmp_path / "w").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The rows of nas-train's table both processes must agree on (the timings differ); the
# config evaluates on split 'test', so its accuracy is the "test accuracy" row.
AGREED = ("test accuracy", "test loss", "parameters", "FLOPs / example", "epochs / steps")


@pytest.mark.slow  # two processes each compile and train a tiny candidate
def test_two_nas_train_processes_train_one_candidate(data_dir, tmp_path):
    from helpers import tiny_graph

    from nas.graph.serialize import graph_to_json

    (tmp_path / "tiny.json").write_text(graph_to_json(*tiny_graph(with_bn=True)))
    (tmp_path / "tiny.py").write_text(
        f"import sys\nsys.path.insert(0, {HERE!r})\nfrom helpers import tiny_config\n\n\n"
        f"def get_config(arg=None):\n"
        # grain on both sides: several processes do not keep the data on the devices
        f"    return tiny_config({data_dir!r}, total_epochs=0.5,\n"
        f"                       **{{'input.device_data_bytes': 0}})\n")
    port, workdir = _free_port(), tmp_path / "run"
    base = {k: v for k, v in os.environ.items() if k not in distributed.ENV.values()}
    # the suite's XLA flags (tests/conftest.py: the cheapest codegen) are kept
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                   "--xla_force_host_platform_device_count=1"]))
    base.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    command = [sys.executable, "-m", "nas.train.cli", f"--config={tmp_path}/tiny.py",
               f"--graph={tmp_path}/tiny.json", f"--workdir={workdir}", "--noprogress",
               "--config.compilation_cache_dir=none"]
    # process 0 joins through the environment, process 1 through config flags
    first = dict(base, NAS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", NAS_NUM_PROCESSES="2",
                 NAS_PROCESS_ID="0")
    second = [f"--config.distributed.coordinator_address=127.0.0.1:{port}",
              "--config.distributed.num_processes=2", "--config.distributed.process_id=1"]
    procs = [subprocess.Popen(command, env=first, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True),
             subprocess.Popen(command + second, env=base, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)]
    try:
        outs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    tables = []
    for out, _ in outs:
        rows = dict(line.split("  ", 1) for line in out.splitlines()
                    if line.split("  ", 1)[0] in AGREED)
        tables.append({k: v.strip() for k, v in rows.items()})
    assert set(tables[0]) == set(AGREED), outs[0][0]
    # One program over both processes: they end with the same metrics.
    assert tables[0] == tables[1], tables
    # Only process 0 writes: one final record, run files and a checkpoint, no file of
    # process 1; the record is the metrics both printed.
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    finals = [json.loads(line)["final"] for line in lines if '"final"' in line]
    assert len(finals) == 1, lines
    assert tables[0]["test accuracy"].startswith(f"{finals[0]['accuracy'] * 100:.2f} %"), (
        finals, tables)
    assert finals[0]["val_examples"] * 2 == 360, finals  # each host evaluated its half
    written = [str(p.relative_to(workdir)) for p in workdir.rglob("*")]
    assert {"config.json", "graph.json"} <= set(written), written
    assert any(w.startswith("checkpoints") for w in written), written
    assert not [w for w in written if "process_1" in w], written
    settings = json.loads((workdir / "config.json").read_text())
    assert settings["distributed"]["process_id"] == -1, settings["distributed"]  # from env
