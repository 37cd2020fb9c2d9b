"""A test hook: an op that blocks its compiled training step on the host.

Why: a search's hard time limit (`search.hard_time_limit_s`) is the only thing that stops a
candidate stuck inside one compiled step, where no step boundary lets the soft limit act.
Proving it needs a real candidate that gets stuck there. With the environment variable
`NAS_TEST_STALL_OP` set to an op name, that op's output passes through a host callback that
sleeps `NAS_TEST_STALL_S` seconds (default 3600) in every training-mode application, or,
with `NAS_TEST_STALL_DIE=1`, kills its own process there with SIGKILL (as the kernel's
out-of-memory killer would: the executor must blame this candidate and no neighbour).
Unset (always, outside tests), nothing changes and nothing is compiled differently.
"""

from __future__ import annotations

import os
import signal
import time

import jax
import jax.numpy as jnp

STALL_OP = "NAS_TEST_STALL_OP"
STALL_S = "NAS_TEST_STALL_S"
STALL_DIE = "NAS_TEST_STALL_DIE"


def stall_op() -> str | None:
    """The op name that stalls (read while tracing), or None."""
    return os.environ.get(STALL_OP) or None


def stalled(x: jax.Array) -> jax.Array:
    """`x`, after a host callback that sleeps. The callback reads `x` (so it runs inside the
    step, before anything that uses the result) and adds a zero outside the gradient path
    (a host callback has no derivative)."""
    seconds = float(os.environ.get(STALL_S, "3600"))
    die = os.environ.get(STALL_DIE) == "1"

    def wait(_: object) -> object:
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(seconds)
        return jnp.zeros((), x.dtype)

    zero = jax.pure_callback(wait, jax.ShapeDtypeStruct((), x.dtype),
                             jax.lax.stop_gradient(jnp.sum(x)))
    return x + jax.lax.stop_gradient(zero)
