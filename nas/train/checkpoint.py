"""Checkpoints of a training run with orbax-checkpoint.

Why: a kill at any moment must leave a resumable run, and nothing loaded from disk may
execute code. orbax writes each step into a temporary directory and renames it when
complete (so a half-written step is never seen as a checkpoint), stores arrays as
tensorstore/OCDBT, and small JSON for the rest; no pickle anywhere.

A checkpoint has two items: `state` (params, frozen params, batch_stats, optimizer state,
EMA, step: a pytree of arrays, restored into the structure of a freshly built state so
optax NamedTuples come back as such) and `meta` (JSON: data iterator state, throughput
measurements, epoch).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import zlib
from types import TracebackType
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def has_checkpoint(workdir: str) -> bool:
    """Whether `workdir` holds a finished checkpoint of a run (orbax names a complete step's
    folder by its number; one still being written carries a temporary suffix)."""
    directory = os.path.join(workdir, "checkpoints")
    return os.path.isdir(directory) and any(n.isdigit() for n in os.listdir(directory))


class Checkpointer:
    """Saves and restores (state, meta) under `<workdir>/checkpoints/<step>`."""

    def __init__(self, workdir: str, keep: int = 2, async_save: bool = True) -> None:
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max(1, keep), create=True, enable_async_checkpointing=async_save
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any], force: bool = False) -> None:
        """Save host copies of `state` (safe to donate device buffers afterwards)."""
        host = jax.tree.map(np.asarray, state)
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(host), meta=ocp.args.JsonSave(meta)
            ),
            force=force,
        )

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Restore the latest (or given) step into the structure of `target`.

        A missing, truncated or mismatched checkpoint raises ValueError naming the
        directory, never a silent partial state. On any failure orbax's background
        machinery is shut down first: a CLI prints its error line and exits, and no orbax
        thread may print after it (e.g. "Event loop is closed" from its async loop).
        """
        drop_closed_loop_callbacks()
        try:
            return self._restore(target, step)
        except BaseException:
            self.close_quietly()
            raise

    def _restore(self, target: Any, step: int | None) -> tuple[Any, dict[str, Any]]:
        step = self.latest_step() if step is None else step
        if step is None:
            raise ValueError(f"checkpoint: no checkpoint in {self.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, jax.tree.map(np.asarray, target))
        try:
            out = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
                ),
            )
            state, meta = out["state"], out["meta"]
        except Exception as e:  # orbax/tensorstore raise many types for a damaged file
            first = str(e).splitlines()[0] if str(e) else ""
            first = re.sub(r"\s*\[[^\]]*$", "", first)[:300]  # an unclosed "[tensorstore_spec"
            raise ValueError(
                f"checkpoint: step {step} in {self.directory} is corrupt or does not match "
                f"this model: {type(e).__name__}: {first}"
            ) from e
        if meta is None or not isinstance(meta, dict):
            raise ValueError(f"checkpoint: step {step} in {self.directory} has no metadata")
        _check_like(target, state, self.directory)
        return jax.tree.map(np.asarray, state), meta

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def close_quietly(self) -> None:
        """`close` on an error path: the error being raised is the one to report."""
        with contextlib.suppress(Exception):
            self._manager.close()


def _check_like(target: Any, state: Any, directory: str) -> None:
    """Shapes and dtypes of the restored state must equal those of the target."""
    want = jax.tree_util.tree_leaves_with_path(target)
    got = jax.tree.leaves(state)
    if len(want) != len(got):
        raise ValueError(f"checkpoint in {directory} has {len(got)} arrays, expected {len(want)}")
    for (path, w), g in zip(want, got, strict=True):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape or w.dtype != g.dtype:
            raise ValueError(
                f"checkpoint in {directory}: {jax.tree_util.keystr(path)} is {g.dtype}{g.shape}, "
                f"expected {w.dtype}{w.shape}"
            )


# Final variables of a candidate (what a search stores and exports), one orbax directory.
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
