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
`nas.Cost(fn, repeats=5)` is a cost of its own timed with a spread). Each is imported on
first use so that `import nas` stays cheap.
"""

from typing import Any

__all__ = ["Cost", "SearchInterrupted", "SearchResult", "StopSearch", "check_import",
           "export_flax", "from_flax", "load_candidate", "preprocess", "run_search",
           "save_candidate"]
_SEARCH_API = ("run_search", "SearchResult", "StopSearch", "SearchInterrupted")


def __getattr__(name: str) -> Any:
    if name == "Cost":
        from nas.functions import Cost

        return Cost
    if name == "load_candidate":
        from nas.io.candidate import load_candidate

        return load_candidate
    if name == "save_candidate":
        from nas.io.candidate import save_candidate

        return save_candidate
    if name == "from_flax":
        from nas.interop.importer import from_flax

        return from_flax
    if name == "check_import":
        from nas.interop.check import check_import

        return check_import
    if name in _SEARCH_API:
        from nas.search import api

        return getattr(api, name)
    if name == "preprocess":
        from nas.train.data import preprocess

        return preprocess
    if name == "export_flax":
        from nas.interop.flax_code import export_flax

        return export_flax
    raise AttributeError(f"module 'nas' has no attribute {name!r}")
