"""Counting the compiled programs JAX actually launches, for tests and benchmarks.

Why: "one program per step" is a claim about what runs, so it is measured where JAX hands
an executable to the runtime, not reported by the code under test. JAX normally launches
from a C++ fast path that Python cannot see; inside `count_launches()` that fast path is
not built for executables first called within the block (jitted functions, ahead-of-time
compiled ones and eager ops alike), so every launch goes through
`ExecuteReplicated.__call__`, which is counted. Executables already called before the
block keep their fast path: create and first call what you measure inside it.

This uses JAX internals (jax 0.10.2: `pjit._get_fastpath_data`,
`pxla.MeshExecutable.create_cpp_call`, `pxla.ExecuteReplicated`); `count_launches`
raises a clear error if they move.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class LaunchCount:
    """Executables launched since the block began (or since `reset()`)."""

    launches: int = 0

    def reset(self) -> None:
        self.launches = 0


@contextlib.contextmanager
def count_launches() -> Iterator[LaunchCount]:
    """Count every compiled-program launch inside the block."""
    try:
        from jax._src import pjit
        from jax._src.interpreters import pxla

        saved = (pjit._get_fastpath_data, pxla.MeshExecutable.create_cpp_call,
                 pxla.ExecuteReplicated.__call__)
    except (ImportError, AttributeError) as e:  # a JAX whose internals moved
        raise RuntimeError(f"count_launches: this JAX has no launch hook ({e})") from None
    count = LaunchCount()
    execute = saved[2]

    def counted(self, *args):
        count.launches += 1
        return execute(self, *args)

    pjit._get_fastpath_data = lambda *args, **kwargs: None
    pxla.MeshExecutable.create_cpp_call = lambda self, params: None
    pxla.ExecuteReplicated.__call__ = counted
    try:
        yield count
    finally:
        (pjit._get_fastpath_data, pxla.MeshExecutable.create_cpp_call,
         pxla.ExecuteReplicated.__call__) = saved
