"""Trained variables of a candidate on disk, with orbax (atomic directories, no pickle)."""

from __future__ import annotations

import os
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


def load_variables(path: str) -> dict[str, Any]:
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"no saved variables at {path!r}")
    try:
        with ocp.StandardCheckpointer() as ckpt:
            restored = ckpt.restore(path)
    except Exception as e:  # orbax raises many types for a damaged directory
        raise ValueError(f"saved variables at {path!r} cannot be read: {e}") from None
    return jax.tree.map(np.asarray, restored)
