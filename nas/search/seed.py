"""The seed of a search from a user's file: a graph JSON or a `nas-search export` file.

Why: a user with their own architecture (or the best candidate of an earlier study) should
be able to start a search from it, with its trained weights when the file points to them,
instead of from a zoo model.
"""

from __future__ import annotations

import json
import os
from typing import Any


def read_seed_graph(path: str) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables or None) from `path`.

    An export file (`"format": "nas-candidate"`) brings the variables of its
    `checkpoint_path` when that checkpoint still exists; a plain graph JSON brings none.
    """
    from nas.graph.serialize import load
    from nas.train.checkpoint import load_variables

    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"config field 'search.seed_graph': cannot read {path}: "
                         f"{e.strerror}") from None
    try:
        graph, constants = load(text)
    except ValueError as e:
        raise ValueError(f"config field 'search.seed_graph': {path} is not a graph JSON or "
                         f"an exported candidate: {e}") from None
    doc = json.loads(text)
    checkpoint = doc.get("checkpoint_path") if doc.get("format") == "nas-candidate" else None
    if not checkpoint:
        return graph, dict(constants or {}), None
    if not os.path.isdir(checkpoint):
        raise ValueError(f"config field 'search.seed_graph': {path} names the checkpoint "
                         f"{checkpoint}, which does not exist")
    return graph, dict(constants or {}), load_variables(checkpoint)
