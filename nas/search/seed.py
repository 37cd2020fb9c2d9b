"""The seed of a search from a user's file: a graph JSON or a `nas-search export` file.

Why: a user with their own architecture (or the best candidate of an earlier study) should
be able to start a search from it, with its trained weights when the file points to them,
instead of from a zoo model.
"""

from __future__ import annotations

import os
from typing import Any

FIELD = "config field 'search.seed_graph'"


def read_seed_graph(path: str) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables or None) from `path`.

    An export file brings the variables of its `checkpoint_path` (which must still exist);
    a plain graph JSON brings none."""
    from nas.graph import serialize
    from nas.search.export import is_export, read_export

    try:
        text, doc = serialize.read_json_file(path)  # not JSON: serialize.load says why
    except OSError as e:
        raise ValueError(f"{FIELD}: cannot read {path}: {e.strerror}") from None
    if is_export(doc):
        checkpoint = doc.get("checkpoint_path")
        if isinstance(checkpoint, str) and not os.path.isdir(checkpoint):
            raise ValueError(f"{FIELD}: {path} names the checkpoint {checkpoint}, which does "
                             f"not exist")
        try:
            graph, constants, variables = read_export(path)
        except ValueError as e:
            raise ValueError(f"{FIELD}: {e}") from None
        return graph, dict(constants or {}), variables
    try:
        graph, constants = serialize.load(text)
    except ValueError as e:
        raise ValueError(f"{FIELD}: {path} is not a graph JSON or an exported candidate: "
                         f"{e}") from None
    return graph, dict(constants or {}), None
