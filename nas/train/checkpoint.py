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

import contextlib
import os
import re
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from nas.io.variables import drop_closed_loop_callbacks, load_variables, save_variables

__all__ = ["Checkpointer", "drop_closed_loop_callbacks", "has_checkpoint", "load_variables",
           "save_variables"]


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

    def restore(self, target: Any, step: int | None = None,
                older: Callable[[Any], tuple[Any, Callable[[Any], Any]] | None] | None = None
                ) -> tuple[Any, dict[str, Any]]:
        """Restore the latest (or given) step into the structure of `target`.

        `older(target)`: (the structure an earlier version wrote, how to bring a state of
        it to `target`'s), or None; tried when `target`'s own structure does not match.
        A missing, truncated or mismatched checkpoint raises ValueError naming the
        directory, never a silent partial state. On any failure orbax's background
        machinery is shut down first: a CLI prints its error line and exits, and no orbax
        thread may print after it (e.g. "Event loop is closed" from its async loop).
        """
        drop_closed_loop_callbacks()
        try:
            try:
                return self._restore(target, step)
            except ValueError:
                earlier = older(target) if older is not None else None
                if earlier is None:
                    raise
            structure, upgrade = earlier
            state, meta = self._restore(structure, step)
            return upgrade(state), meta
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
