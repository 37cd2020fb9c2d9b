"""Calling a user's Flax module on its example batch: the batch checked, a linen module's
variables initialised, a failure cut to one line.

Why a module of its own: both `importer.from_flax` and `check.check_import` call the module
the same way, and the importer runs the check, so these helpers live below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nas.cli_messages import first_line


def example(example_input: Any, prefix: str) -> jax.Array:
    """The example batch as float32; anything else is one line starting with `prefix`."""
    if not hasattr(example_input, "shape") or not hasattr(example_input, "dtype"):
        raise ValueError(f"{prefix}: example_input must be an array (one batch), got "
                         f"{type(example_input).__name__}")
    x = jnp.asarray(example_input)
    if x.ndim < 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{prefix}: example_input must be a float batch (batch, ...), got "
                         f"{x.dtype}{list(x.shape)}")
    return x.astype(jnp.float32)


def is_nnx(model: Any) -> bool:
    """Whether `model` is a `flax.nnx.Module` (flax imported only when asked)."""
    from flax import nnx

    return isinstance(model, nnx.Module)


def init_variables(model: Any, x: jax.Array, call_kwargs: Mapping[str, Any], prefix: str
                   ) -> Any:
    """A linen module's variables from `PRNGKey(0)` (params and dropout), as documented; a
    failing call is one line starting with `prefix`."""
    rng = jax.random.PRNGKey(0)
    try:
        return model.init({"params": rng, "dropout": rng}, x, **call_kwargs)
    except Exception as e:  # noqa: BLE001 - flax and jax raise many types for a bad call
        raise ValueError(f"{prefix}: {type(model).__name__}: calling the module on the "
                         f"example input {x.dtype}{list(x.shape)} failed: "
                         f"{first_line(e)}") from None
