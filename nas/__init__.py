"""Neural architecture search by subgraph mutation, on JAX, Flax and optax.

`nas.load_candidate(path)` loads a candidate exported by `nas-search export` (see
`nas.io.candidate`), `nas.save_candidate(candidate, path)` writes one,
`nas.from_flax(module, x, variables=..., **call_kwargs)` imports a Flax model as one
(`nas.interop.importer`), `nas.check_import(candidate, module, x, variables=...,
**call_kwargs)` compares an import's outputs with the module's (`nas.interop.check`) and
`nas.export_flax(candidate_or_path, directory)` writes one as plain Flax code
(`nas.interop.flax_code`), `nas.preprocess(images)` is what a model sees of uint8
images at evaluation (`x / 127.5 - 1`, `nas.train.data.preprocess`), and
`nas.run_search(seed, data, workdir=..., max_candidates=...)` runs a search from Python,
returning a `nas.SearchResult` (`nas.search.api`; a callback raising `nas.StopSearch`
stops it; an interrupt raises `nas.SearchInterrupted`, a KeyboardInterrupt;
`nas.Cost(fn, repeats=5)` is a cost of its own timed with a spread). `nas.__version__` is
the installed distribution's version.

Each is imported on first use so that `import nas` stays cheap. The imports are statements
inside `__getattr__` (the pattern `nas.train` uses too), not module names in strings, so
that `tests/test_layering.py` sees them.
"""

from typing import Any

_DISTRIBUTION = "alphanas-search"  # the import name is `nas`; the index's `nas` is another

__all__ = ["Cost", "SearchInterrupted", "SearchResult", "StopSearch", "check_import",
           "export_flax", "from_flax", "load_candidate", "preprocess", "run_search",
           "save_candidate"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()["__version__"] = _version()  # read once; later lookups skip this hook
        return globals()["__version__"]
    if name == "Cost":
        from nas import functions as module
    elif name in ("load_candidate", "save_candidate"):
        from nas.io import candidate as module
    elif name == "from_flax":
        from nas.interop import importer as module
    elif name == "check_import":
        from nas.interop import check as module
    elif name == "export_flax":
        from nas.interop import flax_code as module
    elif name == "preprocess":
        from nas.train import data as module
    elif name in ("run_search", "SearchResult", "StopSearch", "SearchInterrupted"):
        from nas.search import api as module
    else:
        raise AttributeError(f"module 'nas' has no attribute {name!r}")
    return getattr(module, name)


def _version() -> str:
    """The installed distribution's version; in a source tree that is not installed (run
    with the tree on PYTHONPATH), the version its pyproject.toml declares; else 0+unknown.
    importlib.metadata is imported here, not at the top: it costs more than `import nas`."""
    import importlib.metadata

    try:
        return importlib.metadata.version(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    import os
    import tomllib

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "pyproject.toml")
    try:
        with open(path, "rb") as f:
            project = tomllib.load(f).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return "0+unknown"
    if project.get("name") != _DISTRIBUTION:  # a pyproject above a copied package: not ours
        return "0+unknown"
    return str(project.get("version", "0+unknown"))
