"""Reading a candidate exported by `nas-search export` (`Study.export` writes it).

The export wraps a plain serialized graph (`nas.graph.serialize`) with the study's record
of the candidate; only this package knows that wrapper. `read_export` is what
`nas-train --graph` calls for such a file.
"""

from __future__ import annotations

import os
from typing import Any

from nas.graph import serialize

FORMAT = "nas-candidate"


def is_export(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def read_export(path: str | os.PathLike) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, trained variables or None) of an exported candidate file."""
    from nas.train.checkpoint import load_variables

    try:
        _, doc = serialize.read_json_file(path)
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    if not is_export(doc):
        raise ValueError(f"{path}: not an exported candidate (expected format {FORMAT!r})")
    try:
        graph, constants = serialize.graph_from_dict(doc.get("graph"))
    except ValueError as e:
        raise ValueError(f"{path}: field 'graph': {e}") from None
    checkpoint = doc.get("checkpoint_path")
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise ValueError(f"{path}: field 'checkpoint_path' must be a string")
    if not checkpoint:
        return graph, constants, None
    try:
        return graph, constants, load_variables(checkpoint)
    except ValueError as e:  # e.g. the study's checkpoint was deleted since the export
        raise ValueError(f"{path}: field 'checkpoint_path': {e}") from None
