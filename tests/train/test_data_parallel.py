"""Data parallelism on a device mesh: 2 forced CPU devices (in subprocesses, since
XLA_FLAGS must be set before jax loads), and no `jax.pmap` left in the package."""

import ast
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

import nas

HERE = os.path.dirname(__file__)
# The pmap-era entry points: pmap is in maintenance mode, the other two are gone.
RETIRED = {"pmap", "device_put_replicated", "device_put_sharded"}


def _run(script: str, *args: str) -> dict:
    # JAX_PLATFORMS=cpu: the forced devices are CPU devices, also where a GPU is the default.
    # The suite's XLA flags (tests/conftest.py: the cheapest codegen) are kept: replacing
    # them would compile the subprocess's programs at full optimization.
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                   "--xla_force_host_platform_device_count=2"]))
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), *args], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_two_device_step_equals_one_device_step_on_whole_batch():
    r = _run("dp_worker.py")
    # Gradients compared directly (a 2x error from a double mean would show here).
    assert abs(r["grad_ratio"] - 1.0) < 1e-5, r
    assert r["grad_diff"] <= 1e-5 * max(1.0, r["grad_scale"]), r
    assert r["param_diff"] < 1e-6, r
    assert r["loss_diff"] < 1e-5, r
    assert r["replica_diff"] == 0.0, r


@pytest.mark.slow  # compiles the reversible step twice in a subprocess
def test_reversible_trainer_on_a_two_device_mesh_equals_one_device():
    r = _run("mesh_worker.py", "reversible")
    assert r["devices"] == 2, r
    # plain SGD: equal updates are equal gradients
    assert r["update_diff"] <= 1e-5 * max(1.0, r["update_scale"]), r
    assert r["loss_diff"] < 1e-5 and r["logits_diff"] < 1e-4, r


@pytest.mark.slow  # three tiny train_and_eval runs in a subprocess
def test_train_and_eval_on_a_two_device_mesh(data_dir):
    r = _run("mesh_worker.py", "train", data_dir)
    for name, m in r.items():
        assert m["steps"] >= 1 and m["finite"], (name, m)
        assert 0.0 <= m["acc"] <= 1.0 and m["rate"] > 0, (name, m)
        assert m["bits"] == m["eval_examples"], (name, m)
        assert abs(m["bits_acc"] - m["acc"]) < 1e-9, (name, m)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # three processes each compile a tiny candidate
def test_two_processes_train_one_candidate_as_one_process_with_two_devices(data_dir,
                                                                           tmp_path):
    worker = os.path.join(HERE, "multihost_worker.py")
    port, workdir = str(_free_port()), tmp_path / "run"
    procs = [subprocess.Popen([sys.executable, worker, "process", str(i), port, str(workdir),
                               data_dir],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    hosts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    single = _run("multihost_worker.py", "single", data_dir)
    assert [h["process"] for h in hosts] == [0, 1], hosts
    assert all(h["processes"] == 2 and h["devices"] == 2 for h in hosts), hosts
    # One program over both processes: they end with the same weights and metrics.
    assert hosts[0] == dict(hosts[1], process=0), hosts
    # One process with 2 devices reads the same examples in another order (each host reads
    # its own share of the split), so its run agrees up to that.
    assert single["devices"] == 2 and single["steps"] == hosts[0]["steps"], (single, hosts)
    # each host evaluates its half; the accuracy is summed over both
    assert single["eval_examples"] == 2 * hosts[0]["eval_examples"], (single, hosts)
    assert abs(single["acc"] - hosts[0]["acc"]) < 0.1, (single, hosts)
    assert abs(single["loss"] - hosts[0]["loss"]) < 0.1, (single, hosts)
    # Only process 0 writes: one final record, a checkpoint with no file of process 1.
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    assert sum('"final"' in line for line in lines) == 1, lines
    written = [str(p.relative_to(workdir)) for p in workdir.rglob("*")]
    assert any(w.startswith("checkpoints") for w in written), written
    assert not [w for w in written if "process_1" in w], written


def test_mesh_shape_is_checked_in_one_line_naming_the_field():
    import jax

    from nas.train import config as config_lib
    from nas.train import mesh as mesh_lib

    assert config_lib.with_defaults({"mesh_shape": [1]}).mesh_shape == (1,)
    for bad in ((0,), (2, 2), (-2,), (True,), "2", 2):
        with pytest.raises(ValueError, match="config field 'mesh_shape'"):
            config_lib.with_defaults({"mesh_shape": bad})
    with pytest.raises(ValueError, match="config field 'mesh_shape'.*present"):
        mesh_lib.build((jax.device_count() + 1,))
    assert mesh_lib.size(mesh_lib.build()) == jax.device_count()


def _retired_calls(source: str) -> list[str]:
    """`jax.pmap`-style attribute uses and `from jax import pmap`-style imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in RETIRED:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jax"):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name in RETIRED]
    return found


def test_the_retired_calls_are_found_where_they_are():
    assert _retired_calls("import jax\nf = jax.pmap(g)\n") == ["line 2: .pmap"]
    assert _retired_calls("from jax import pmap as p\n") == ["line 1: import pmap"]
    assert _retired_calls("import jax\nf = jax.jit(g)\n") == []


def test_nothing_in_the_package_calls_pmap():
    root = pathlib.Path(nas.__file__).parent
    found = {str(p.relative_to(root)): hits for p in sorted(root.rglob("*.py"))
             if (hits := _retired_calls(p.read_text()))}
    assert not found, found
