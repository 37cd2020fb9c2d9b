"""Neural architecture search by subgraph mutation, on JAX, Flax and optax.

`nas.load_candidate(path)` loads a candidate exported by `nas-search export` (see
`nas.io.candidate`); `nas.export_flax(candidate_or_path, directory)` writes it as plain Flax
code (`nas.interop.flax_code`). Both are imported on first use so that `import nas` stays
cheap.
"""

from typing import Any

__all__ = ["export_flax", "load_candidate"]


def __getattr__(name: str) -> Any:
    if name == "load_candidate":
        from nas.io.candidate import load_candidate

        return load_candidate
    if name == "export_flax":
        from nas.interop.flax_code import export_flax

        return export_flax
    raise AttributeError(f"module 'nas' has no attribute {name!r}")
