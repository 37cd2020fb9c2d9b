"""Suite-wide setup, before any test imports jax.

On a GPU, XLA preallocates 75 % of the device per process: with pytest-xdist workers (and
the subprocesses some tests start) the second process would run out of memory. Allocate on
demand instead; a value the user set wins.

XLA:GPU reductions are not bitwise deterministic by default, and the resume tests compare a
resumed run with an uninterrupted one: ask for deterministic GPU ops (ignored on CPU).
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
if "xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        filter(None, [os.environ.get("XLA_FLAGS"), "--xla_gpu_deterministic_ops=true"]))
