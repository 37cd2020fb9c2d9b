"""Suite-wide setup, before any test imports jax.

On a GPU, XLA preallocates 75 % of the device per process: with pytest-xdist workers (and
the subprocesses some tests start) the second process would run out of memory. Allocate on
demand instead; a value the user set wins.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
