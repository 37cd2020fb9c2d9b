"""Tasks for a bare process pool in tests: importable by a spawned worker without jax."""

import os
import signal
import time


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def die_after(seconds: float) -> None:
    """Kills its own process, as the kernel's out-of-memory killer would."""
    time.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)
