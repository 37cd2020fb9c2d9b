"""`check_import`: does an imported candidate compute what its Flax module computes?

Why apart from `from_flax`: the comparison compiles the module and the imported graph, two
XLA compilations that are most of a large model's import (a ResNet-50: ~90 %), so
`from_flax` only traces and translates, and the places where an import is kept
(`nas-search import`, the tests) run this check, or `from_flax` inside `checked_imports()`.
Nothing a misread translation computes then goes unnoticed where users import for keeps.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

PREFIX = "nas.check_import"
TOLERANCE = 1e-4  # of the largest output's magnitude: float32 noise, not a wrong weight

_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("nas_checked_imports",
                                                                default=False)


@contextlib.contextmanager
def checked_imports() -> Iterator[None]:
    """Within it, every `from_flax` also runs `check_import` on its example (the CLI's
    `nas-search import` runs inside one)."""
    token = _CHECKED.set(True)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def checking() -> bool:
    """Whether `from_flax` runs inside `checked_imports()`."""
    return _CHECKED.get()


@dataclasses.dataclass(frozen=True)
class ImportCheck:
    """What one check measured: the largest |imported - module| output difference on the
    example, beside the largest |output|, so a user sees how close, not only "passed"."""

    largest_difference: float
    largest_output: float

    @property
    def relative(self) -> float:
        """The difference as a fraction of the largest output (what the tolerance bounds)."""
        return self.largest_difference / max(self.largest_output, 1e-6)

    def text(self) -> str:
        """E.g. "largest |output difference| 2.4e-07 (4.5e-08 of the largest |output| 5.31;
        tolerance 1e-04)"."""
        return (f"largest |output difference| {self.largest_difference:.2g} "
                f"({self.relative:.2g} of the largest |output| {self.largest_output:.3g}; "
                f"tolerance {TOLERANCE:.0e})")


def check_import(candidate: Any, model: Any, example_input: Any, *,
                 variables: Mapping[str, Any] | None = None, **call_kwargs: Any) -> float:
    """Compare `candidate` (from `nas.from_flax`) with `model` on `example_input`.

    `model`, `variables` and `call_kwargs` as given to `from_flax` (a linen module without
    `variables` is initialised as `from_flax` does). Returns the largest difference
    relative to the largest output; a difference above 1e-4 of it, or another output
    shape, is one ValueError line. `measure_import` returns both numbers."""
    return measure_import(candidate, model, example_input, variables=variables,
                          **call_kwargs).relative


def measure_import(candidate: Any, model: Any, example_input: Any, *,
                   variables: Mapping[str, Any] | None = None, **call_kwargs: Any
                   ) -> ImportCheck:
    """`check_import`, returning what it measured (absolute and relative)."""
    from nas.cli_messages import first_line
    from nas.interop import layers
    from nas.interop.calling import example, init_variables
    from nas.io.candidate import ExportedCandidate

    if not isinstance(candidate, ExportedCandidate) or candidate.variables is None:
        raise ValueError(f"{PREFIX}: expected the candidate nas.from_flax returned, got "
                         f"{type(candidate).__name__}")
    x = example(example_input, PREFIX)
    root = type(model).__name__
    if layers.is_linen(model) and variables is None:
        variables = init_variables(model, x, call_kwargs, PREFIX)
    # Full float32 matmuls on both sides: a GPU's default (TF32) differs by more than the
    # tolerance between two orders of the same contraction.
    with jax.default_matmul_precision("float32"):
        try:
            want = _original(model, x, variables, call_kwargs)
        except Exception as e:  # noqa: BLE001 - flax and jax raise many types for a bad call
            raise ValueError(f"{PREFIX}: {root}: calling the module on the example input "
                             f"{x.dtype}{list(x.shape)} failed: "
                             f"{first_line(e)}") from None
        got = np.asarray(jax.jit(candidate.model.apply)(candidate.variables, x))
    if got.shape != want.shape:
        raise ValueError(f"{PREFIX}: {root}: the imported graph gives shape {list(got.shape)}, "
                         f"the module {list(want.shape)}")
    measured = ImportCheck(float(np.max(np.abs(got - want))), float(np.max(np.abs(want))))
    if not measured.relative <= TOLERANCE:
        raise ValueError(f"{PREFIX}: {root}: the imported graph does not reproduce the "
                         f"module's output (largest difference {measured.relative:.2g} of "
                         f"the largest output, tolerance {TOLERANCE:g}): a part was misread "
                         f"(please report it), or the module computes differently at each "
                         f"call")
    return measured


def _original(model: Any, x: jax.Array, variables: Any, call_kwargs: Mapping[str, Any]
              ) -> np.ndarray:
    """The module's own output, jitted (one compilation, not one per primitive)."""
    from nas.interop import layers

    if layers.is_linen(model):
        return np.asarray(jax.jit(lambda v, x: model.apply(v, x, **call_kwargs))(variables, x))
    return np.asarray(jax.jit(lambda x: model(x, **call_kwargs))(x))
