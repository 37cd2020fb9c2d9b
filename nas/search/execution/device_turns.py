"""Processes of one search take turns on a device: one trains while the others prepare.

Why a file lock (`fcntl.flock` on a file in the host's temporary directory, named after the
search's workdir and the device): every process of a search that serves the same device on
this host finds it from plain data, whichever executor started it (the local executor's
worker processes, Ray tasks placed on this node, external `nas-search worker`s), and the
kernel releases it when its holder dies, so a killed worker never leaves its device locked.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from typing import Any


def lock_dir() -> str:
    """$NAS_DEVICE_LOCKS, else `nas-device-locks` in the host's temporary directory."""
    return os.environ.get("NAS_DEVICE_LOCKS") or os.path.join(tempfile.gettempdir(),
                                                             "nas-device-locks")


def device_key() -> str:
    """This process's device, the same in every process that uses it: "cpu" (the host's
    cores; "cpu-N" for slot N of a local executor with several workers, which treats
    them as that many devices), else the platform and the GPUs this process sees
    (CUDA_VISIBLE_DEVICES, which names them for the whole host, where set)."""
    import jax

    devices = jax.local_devices()
    platform = devices[0].platform
    if platform == "cpu":
        slot = os.environ.get("NAS_DEVICE_SLOT")
        return f"cpu-{slot}" if slot else "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = visible or ",".join(str(d.id) for d in devices)
    return f"{platform}-{ids.replace(',', '_')}"


def lock_path(workdir: str) -> str:
    """The lock file of this process's device for the search in `workdir`."""
    search = hashlib.sha256(os.path.realpath(workdir).encode()).hexdigest()[:16]
    return os.path.join(lock_dir(), search, f"{device_key()}.lock")


class DeviceTurn:
    """A candidate's turn on its device (`with turn:`, as often as needed); `waited` sums
    the time spent waiting for it, which the candidate's time limit excludes."""

    def __init__(self, path: str) -> None:
        self.path, self.waited = path, 0.0
        self._fd: int | None = None

    def __enter__(self) -> DeviceTurn:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        start = time.monotonic()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self.waited += time.monotonic() - start
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases the lock
