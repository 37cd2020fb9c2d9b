"""`nas-search import`: a user's Flax model (`package.module:factory`, with its weights if
given) written as a seed file for `--seed_graph`, so searching it needs no Python."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from nas.cli_messages import first_line

if TYPE_CHECKING:  # jax comes with it: imported when an import runs, not before
    from nas.interop.check import ImportCheck

EXAMPLE_BATCH = 2  # a batch of 2 keeps the batch axis apart from any size-1 axis


def parse_factory(spec: str) -> Any:
    """The factory named by `package.module:factory`, imported (the working directory is
    searched first, as `python -m` does)."""
    module_name, sep, attr = (spec or "").partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise ValueError(f"--flax={spec}: expected package.module:factory")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"--flax={spec}: cannot import {module_name!r}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the user's module failed while importing
        raise ValueError(f"--flax={spec}: importing {module_name!r} raised "
                         f"{type(e).__name__}: {first_line(e)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"--flax={spec}: {module_name} has no callable {attr!r}")
    return factory


def parse_shape(text: str | None) -> tuple[int, ...]:
    """`32,32,3` -> (32, 32, 3): one example's shape, without the batch axis."""
    try:
        shape = tuple(int(p) for p in (text or "").split(","))
    except ValueError:
        shape = ()
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"--input_shape={text}: expected sizes > 0 separated by commas, "
                         f"e.g. 32,32,3")
    return shape


def read_variables(path: str) -> dict[str, Any]:
    """A `flax.serialization.msgpack_serialize` file, or an orbax checkpoint directory."""
    from flax import serialization

    if os.path.isdir(path):
        from nas.train.checkpoint import load_variables

        try:
            return load_variables(path)
        except ValueError as e:
            raise ValueError(f"--variables={path}: {first_line(e)}") from None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"--variables={path}: {e.strerror}") from None
    try:
        tree = serialization.msgpack_restore(data)
    except Exception as e:  # noqa: BLE001 - msgpack raises many types for a damaged file
        raise ValueError(f"--variables={path}: not a flax msgpack file ({first_line(e)})") from None
    if not isinstance(tree, dict) or "params" not in tree:
        raise ValueError(f"--variables={path}: expected the module's variables "
                         f"{{'params': ..., 'batch_stats'?: ...}}")
    return tree


@dataclasses.dataclass(frozen=True)
class Imported:
    """A written seed file and what the import check measured."""

    path: str
    check: ImportCheck

    def line(self) -> str:
        """What `nas-search import` prints."""
        return (f"{self.path}: import checked on a random batch of {EXAMPLE_BATCH}, "
                f"{self.check.text()}")


def import_flax(spec: str, input_shape: str | None, variables: str | None,
                out: str | None) -> str:
    """Imports the module and writes the seed file; returns its path. Checked only inside
    `nas.interop.check.checked_imports()`."""
    candidate, _, _, _ = _imported(spec, input_shape, variables, out)
    return _save(candidate, out)


def import_checked(spec: str, input_shape: str | None, variables: str | None,
                   out: str | None) -> Imported:
    """`import_flax` with the import check always run before anything is written. Call it
    outside `checked_imports()`, which would check a second time."""
    from nas.interop.check import measure_import

    candidate, model, x, loaded = _imported(spec, input_shape, variables, out)
    measured = measure_import(candidate, model, x, variables=loaded)
    return Imported(_save(candidate, out), measured)


def _imported(spec: str, input_shape: str | None, variables: str | None, out: str | None
              ) -> tuple[Any, Any, Any, dict[str, Any] | None]:
    """The imported candidate, the module, the example batch and its variables (None:
    `from_flax` initialises a linen module)."""
    if not out:
        raise ValueError("import needs --out=FILE.zip")
    shape = parse_shape(input_shape)
    factory = parse_factory(spec)
    import jax

    from nas.interop.calling import is_nnx
    from nas.interop.importer import from_flax
    from nas.interop.layers import is_linen

    try:
        model = factory()
    except Exception as e:  # noqa: BLE001 - the user's factory failed
        raise ValueError(f"--flax={spec}: the factory raised {type(e).__name__}: "
                         f"{first_line(e)}") from None
    if not is_linen(model) and not is_nnx(model):
        raise ValueError(f"--flax={spec}: the factory returned {type(model).__name__}, not a "
                         f"flax.linen or flax.nnx Module")
    loaded = None
    if variables:
        if not is_linen(model):
            raise ValueError(f"--variables={variables}: the factory returned an NNX module, "
                             f"which holds its own weights")
        loaded = read_variables(variables)
    x = jax.random.normal(jax.random.PRNGKey(0), (EXAMPLE_BATCH, *shape))
    return from_flax(model, x, variables=loaded), model, x, loaded


def _save(candidate: Any, out: str) -> str:
    from nas.io.candidate import save_candidate

    try:
        return str(save_candidate(candidate, out))
    except OSError as e:
        raise ValueError(f"--out={out}: {e.strerror}") from None
