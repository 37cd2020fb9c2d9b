"""Neural architecture search by subgraph mutation, on JAX, Flax and optax.

`nas.load_candidate(path)` loads a candidate exported by `nas-search export` (see
`nas.io.candidate`); it is imported on first use so that `import nas` stays cheap.
"""

from typing import Any

__all__ = ["load_candidate"]


def __getattr__(name: str) -> Any:
    if name == "load_candidate":
        from nas.io.candidate import load_candidate

        return load_candidate
    raise AttributeError(f"module 'nas' has no attribute {name!r}")
