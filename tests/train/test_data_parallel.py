"""2 forced CPU devices (in a subprocess, since XLA_FLAGS must be set before jax loads)."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(__file__)


def test_two_device_step_equals_one_device_step_on_whole_batch():
    # JAX_PLATFORMS=cpu: the forced devices are CPU devices, also where a GPU is the default.
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "dp_worker.py")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    # Gradients compared directly (a 2x error from a double mean would show here).
    assert abs(r["grad_ratio"] - 1.0) < 1e-5, r
    assert r["grad_diff"] <= 1e-5 * max(1.0, r["grad_scale"]), r
    assert r["param_diff"] < 1e-6, r
    assert r["loss_diff"] < 1e-5, r
    assert r["replica_diff"] == 0.0, r
