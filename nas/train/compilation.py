"""Compile once: JAX's persistent compilation cache, and counting what a candidate compiles.

Why: on an accelerator a small candidate spends more time compiling than training (24 % of
a README search's wall time on an H200). Every worker of a search points JAX at the same
cache directory, so a step already compiled by any process (the same graph re-trained, a
resumed candidate, a worker restarted) is loaded instead of compiled. `CompileCounter`
counts the backend compilations and cache hits of one candidate, so the result shows that
each candidate compiles its train and eval steps once and nothing else (FLOPs are counted
from the jaxpr, images/sec on the already compiled steps).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import jax
from jax import monitoring

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def default_cache_dir() -> str:
    """$NAS_COMPILATION_CACHE, else ~/.cache/nas/jax_compilation_cache."""
    return os.environ.get("NAS_COMPILATION_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "nas", "jax_compilation_cache")


def enable_cache(directory: str | None) -> str | None:
    """Point this process's JAX at a persistent compilation cache (None or "none": off).

    Entries of any compile time are kept (the default skips those under a second, which is
    every small candidate on CPU). Returns the directory used.
    """
    if directory is None or directory.lower() == "none":
        return None
    directory = os.path.abspath(os.path.expanduser(directory or default_cache_dir()))
    if jax.config.jax_compilation_cache_dir == directory:
        return directory
    os.makedirs(directory, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:  # JAX decides once per process whether a cache is used: ask it again
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except (ImportError, AttributeError):  # a JAX without it: takes effect in new processes
        pass
    return directory


# XLA:CPU hands convolutions to its YNN (XNNPACK) library fusions. For a forward pass that
# pays (a CNN's evaluation: the whole network in one fusion), for a gradient step it does
# not: the README CifarNet's train step ran 2.7x slower with them, a ResNet18's the same
# (benchmarks/compile_effort.py). Programs that take gradients are compiled without.
_NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": ""}


@functools.cache
def gradient_options() -> dict[str, str]:
    """Compiler options for the programs that compute gradients (train and fit steps): on
    the CPU, no YNN library fusions; none elsewhere, or where this XLA lacks the option
    (asked once per process, by compiling a one-op program with it)."""
    if jax.default_backend() != "cpu":
        return {}
    try:
        jax.jit(lambda x: x + 1).lower(0.0).compile(compiler_options=_NO_YNN)
    except jax.errors.JaxRuntimeError:
        return {}
    return dict(_NO_YNN)


class CompileCounter:
    """Counts backend compilations and persistent-cache hits while in a `with` block, and
    names the programs compiled (cache misses), e.g. to find an eager op that compiles."""

    def __init__(self) -> None:
        self.requests = 0  # compile requests: compiled, or loaded from the persistent cache
        self.cache_hits = 0
        self.compile_seconds = 0.0
        self.compiled: list[str] = []  # names of the programs XLA compiled, in order
        self._hit_in: set[int] = set()  # threads whose current request hit the cache
        self._lock = threading.Lock()

    @property
    def compiles(self) -> int:
        """Programs XLA actually compiled (JAX times a cache load as a compile too)."""
        return max(self.requests - self.cache_hits, 0)

    def _duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        # JAX records a request's cache hit, then its duration, in the requesting thread.
        if event != COMPILE_EVENT:
            return
        with self._lock:
            self.requests += 1
            self.compile_seconds += seconds
            if threading.get_ident() in self._hit_in:
                self._hit_in.discard(threading.get_ident())
            else:
                self.compiled.append(str(kwargs.get("fun_name", "?")))

    def _event(self, event: str, **kwargs: Any) -> None:
        if event == CACHE_HIT_EVENT:
            with self._lock:
                self.cache_hits += 1
                self._hit_in.add(threading.get_ident())

    def __enter__(self) -> CompileCounter:
        monitoring.register_event_duration_secs_listener(self._duration)
        monitoring.register_event_listener(self._event)
        return self

    def __exit__(self, *exc: Any) -> None:
        monitoring.unregister_event_duration_listener(self._duration)
        monitoring.unregister_event_listener(self._event)
