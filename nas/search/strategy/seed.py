"""The seed of a search from a user's file: a graph JSON or a `nas-search export` file.

Why: a user with their own architecture (or the best candidate of an earlier study) should
be able to start a search from it, with its trained weights when the file has them,
instead of from a zoo model.
"""

from __future__ import annotations

from typing import Any

FIELD = "config field 'search.seed_graph'"


def read_seed_graph(path: str, field: str = FIELD
                    ) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables or None) from `path`; errors name `field`.

    An exported candidate brings its weights (a version 1 export, those of its
    `checkpoint_path`, which must still exist); a plain graph JSON brings none."""
    from nas.graph import serialize
    from nas.io.candidate import read_graph_or_export_for

    found = read_graph_or_export_for(field, path)
    if not isinstance(found, bytes):
        return found.graph, dict(found.constants), found.variables
    try:
        graph, constants = serialize.load(found)
    except ValueError as e:
        raise ValueError(f"{field}: {path} is not a graph JSON or an exported candidate: "
                         f"{e}") from None
    return graph, dict(constants or {}), None
