"""A candidate's final variables as one orbax directory: what a search stores, exports and
reads back, and what an exported candidate's `checkpoint_path` names.

Why in `nas.io`: training writes these files and `nas.io.candidate` reads them, so they
live below both (orbax, no pickle: nothing loaded from disk may execute code). Reading
also silences asyncio's "Event loop is closed" reports that follow a failed orbax read.
"""

from __future__ import annotations

import collections
import os
import sys
import zlib
from types import TracebackType
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def save_variables(path: str, variables: dict[str, Any]) -> str:
    """Writes `variables` ({"params", "batch_stats"?}) to `path`; returns the absolute path.

    orbax writes to a temporary directory and renames it when complete, so a kill leaves
    either nothing or a whole checkpoint.
    """
    path = os.path.abspath(path)
    host = jax.tree.map(np.asarray, variables)
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(path, host, force=True)
    return path


def load_variables(path: str, *, shared: bool = False) -> dict[str, Any]:
    """The variables saved at `path`, as numpy arrays.

    `shared=True` (for callers that never write into them): read-only arrays, kept by this
    process and handed out again while the files under `path` hold the same bytes. Why: a
    search driver reads a parent's variables to mutate it and again for each child's fit,
    and an orbax read costs about 30 ms of a child's time outside training."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"no saved variables at {path!r}")
    if shared:
        kept = _SHARED.get(path)
        if kept is not None:
            return jax.tree.map(lambda a: a, kept)  # the caller's own dicts
    drop_closed_loop_callbacks()
    try:
        with ocp.StandardCheckpointer() as ckpt:
            restored = ckpt.restore(path)
    except Exception as e:  # orbax raises many types for a damaged directory
        raise ValueError(f"saved variables at {path!r} cannot be read: {e}") from None
    host = jax.tree.map(np.asarray, restored)
    if shared:
        _SHARED.put(path, host)
        return jax.tree.map(lambda a: a, host)
    return host


def _closed_loop_callback(e: BaseException | None, tb: TracebackType | None) -> bool:
    """Whether `e` is "Event loop is closed" raised by asyncio's `call_soon_threadsafe`."""
    if not (isinstance(e, RuntimeError) and str(e) == "Event loop is closed"):
        return False
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "call_soon_threadsafe":
            return True
        tb = tb.tb_next
    return False


def drop_closed_loop_callbacks() -> None:
    """Silences one harmless report that follows a failed orbax read, for this process.

    Why: orbax awaits a checkpoint's reads in an event loop of its own and closes that loop
    as soon as one read fails (a deleted or damaged array file); tensorstore's threads then
    finish the other reads and hand each result to the closed loop, and every such hand-off
    printed "RuntimeError: Event loop is closed" as an unraisable exception, before, inside
    or after the CLI's one error line. Those results have nobody waiting for them. Only
    exactly that exception is dropped; every other goes to the previous hook."""
    previous = sys.unraisablehook
    if getattr(previous, "nas_drops_closed_loop_callbacks", False):
        return

    def hook(unraisable: Any) -> None:
        if not _closed_loop_callback(unraisable.exc_value, unraisable.exc_traceback):
            previous(unraisable)

    hook.nas_drops_closed_loop_callbacks = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class _SharedVariables:
    """Read-only variables by directory, each with a checksum of the files it was read
    from; at most `max_bytes` of arrays (the oldest read goes first)."""

    def __init__(self, max_bytes: int = 256 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[str, tuple[Any, Any, int]] = (
            collections.OrderedDict())

    @staticmethod
    def _checksum(path: str) -> tuple[Any, ...] | None:
        """(relative name, size, CRC-32) of every file under `path`; None if unreadable."""
        found = []
        try:
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    with open(os.path.join(root, name), "rb") as f:
                        data = f.read()
                    found.append((os.path.relpath(f.name, path), len(data), zlib.crc32(data)))
        except OSError:
            return None
        return tuple(found) or None

    def put(self, path: str, variables: Any) -> None:
        self._entries.pop(path, None)
        size = sum(a.nbytes for a in jax.tree.leaves(variables))
        checksum = self._checksum(path) if size <= self.max_bytes else None
        if checksum is None:
            return
        for a in jax.tree.leaves(variables):
            a.setflags(write=False)
        self._entries[path] = (checksum, variables, size)
        while sum(e[2] for e in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)

    def get(self, path: str) -> Any | None:
        entry = self._entries.get(path)
        if entry is None:
            return None
        if entry[0] != self._checksum(path):
            del self._entries[path]
            return None
        self._entries.move_to_end(path)
        return entry[1]


_SHARED = _SharedVariables()
